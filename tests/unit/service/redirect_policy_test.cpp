// [redirect] on its way to the IKE engine: the config's policy becomes the
// engine's (redirect_policy()), and the line the log and a reload print
// names what it does (redirect_text()).
#include "conf/config.hpp"
#include "service/ike_service.hpp"

#include <doctest/doctest.h>
#include <string>

using namespace esptun;

namespace {

conf::Config gateway(const std::string& redirect) {
	return conf::parse_config("[tunnel]\naddress_pool = [\"10.77.0.0/24\"]\n[[peer]]\nname = \"alice\"\n"
	                          "psk = \"alice-pre-shared-key-0123456789\"\n[redirect]\n" +
	                              redirect,
	                          "gw.toml", conf::Role::gateway);
}

using When = ike::RedirectPolicy::When;

} // namespace

TEST_CASE("redirect_policy() hands the engine the config's gateways in order, with their types") {
	const ike::RedirectPolicy p = service::redirect_policy(gateway(
	    "when = \"all\"\nto = [\"192.0.2.2\", \"2001:db8::2\", \"gw3.example.net\"]\nmove_rate = 7\n"));
	CHECK(p.when == When::all);
	REQUIRE(p.to.size() == 3);
	CHECK(p.to[0] == *ike::parse_redirect_target("192.0.2.2"));
	CHECK(p.to[1].type == ike::RedirectTarget::Type::ipv6);
	CHECK(p.to[2].type == ike::RedirectTarget::Type::fqdn);
	CHECK(p.move_rate == 7);

	const ike::RedirectPolicy cap =
	    service::redirect_policy(gateway("when = \"capacity\"\nto = [\"192.0.2.2\"]\ncapacity = 5000\n"));
	CHECK(cap.when == When::capacity);
	CHECK(cap.capacity == 5000);
	const ike::RedirectPolicy share =
	    service::redirect_policy(gateway("when = \"share\"\nto = [\"192.0.2.2\"]\nshare = 25\n"));
	CHECK(share.when == When::share);
	CHECK(share.share_percent == 25);

	// An empty [redirect], as none at all: nobody is sent anywhere.
	const ike::RedirectPolicy never = service::redirect_policy(gateway(""));
	CHECK(never.when == When::never);
	CHECK(never.to.empty());
}

TEST_CASE("redirect_text() says where clients go and what the policy's number means") {
	auto text = [](const std::string& redirect) {
		return service::redirect_text(service::redirect_policy(gateway(redirect)));
	};
	CHECK(text("when = \"all\"\nto = [\"192.0.2.2\", \"192.0.2.3\"]\n") ==
	      "redirect: when all, to 192.0.2.2, 192.0.2.3; established clients move at 100/s");
	CHECK(text("when = \"capacity\"\nto = [\"gw2.example.net\"]\ncapacity = 5000\n") ==
	      "redirect: when capacity, to gw2.example.net; new clients go while 5000 peers or more hold "
	      "an IKE SA");
	CHECK(text("when = \"share\"\nto = [\"2001:db8::2\"]\nshare = 25\n") ==
	      "redirect: when share, to 2001:db8::2; 25% of new clients go (none that another gateway "
	      "sent here)");
	CHECK(text("to = [\"192.0.2.2\"]\n") == "redirect: when never (every client is served here)");
}
