// [redirect] as the IKE engine spells it: the loader's RedirectWhen (in
// config.hpp, which does not include the engine) has the engine's values
// in the engine's order, so one converts to the other by a cast.
#pragma once

#include "conf/config.hpp"
#include "ike/engine.hpp"

namespace esptun::conf {

/// engine_when() - @w as ike::RedirectPolicy::When.
ike::RedirectPolicy::When engine_when(RedirectWhen w) noexcept;

} // namespace esptun::conf
