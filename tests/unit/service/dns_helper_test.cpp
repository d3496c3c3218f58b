// service/dns_helper: the root helper runs only the DNS tools, and answers
// with what the tool did.
#include <doctest/doctest.h>

#include <unistd.h>

#include "service/dns_helper.hpp"

namespace esptun::service {
namespace {

TEST_CASE("dns_tool_allowed: resolvectl and resolvconf from the fixed folders only") {
	CHECK(dns_tool_allowed({"/usr/bin/resolvectl", "dns", "esp0", "10.0.0.53"}));
	CHECK(dns_tool_allowed({"/sbin/resolvconf", "-a", "esp0"}));
	CHECK_FALSE(dns_tool_allowed({}));
	CHECK_FALSE(dns_tool_allowed({"/bin/sh", "-c", "id"}));
	CHECK_FALSE(dns_tool_allowed({"/tmp/resolvconf", "-a", "esp0"}));
	CHECK_FALSE(dns_tool_allowed({"/usr/bin/../bin/sh"}));
	CHECK_FALSE(dns_tool_allowed({"resolvconf", "-a", "esp0"}));
	CHECK_FALSE(dns_tool_allowed({"/sbin/resolvconf", std::string("-a\0x", 4)}));
}

TEST_CASE("DnsHelper: runs an allowed tool and reports its outcome, refuses others") {
	std::string tool;
	for (const std::string& dir : kDnsToolDirs)
		for (const char* name : {"resolvconf", "resolvectl"})
			if (tool.empty() && ::access((dir + "/" + name).c_str(), X_OK) == 0)
				tool = dir + "/" + name;
	REQUIRE_MESSAGE(!tool.empty(), "neither resolvconf nor resolvectl installed (scripts/setup.sh)");
	auto helper = DnsHelper::start();
	CHECK(helper->run({tool, "--version"}, "", std::chrono::seconds(5)) == "");
	const std::string bad = helper->run({tool, "--no-such-option-x"}, "", std::chrono::seconds(5));
	CHECK(bad.find("exit status") == 0);
	CHECK(helper->run({"/bin/sh", "-c", "touch /tmp/esptun-helper-x"}, "", std::chrono::seconds(5)) ==
	      "refused by the DNS helper: not a DNS tool");
	CHECK(::access("/tmp/esptun-helper-x", F_OK) != 0);
	// Still answering after a refusal.
	CHECK(helper->run({tool, "--version"}, "", std::chrono::seconds(5)) == "");
}

} // namespace
} // namespace esptun::service
