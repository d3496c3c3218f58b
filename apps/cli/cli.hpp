// The command line shared by esptun-gateway and esptun-client:
// `run|up -c FILE`, `check -c FILE`, `status -c FILE`.
#pragma once

#include "conf/config.hpp"

namespace esptun::cli {

/**
 * cli_main() - parse arguments and run the chosen command
 * @role: gateway (verb "run") or client (verb "up")
 * Return: the process exit status: 0 success, 1 failure, 2 usage error.
 */
int cli_main(conf::Role role, int argc, char** argv);

} // namespace esptun::cli
