// `esptun-bench compare`: the subjects under test. Each one brings up its
// tunnel between the two namespaces of the underlay (its own inner subnet,
// its own UDP ports, its own interface names) and stays up for the whole
// run, so the measurements can go round-robin over all subjects.
//
//   subject        inner A / B          underlay port   processes (both ends)
//   veth           10.203.0.1 / .2      -               -
//   esptun-direct  10.99.1.1 / .2       4501            esptun-gateway x2
//   esptun-vhost   10.99.2.1 / .2       4502            esptun-gateway x2
//   wireguard-go   10.99.3.1 / .2       51820           wireguard-go x2
//   openvpn-gcm    10.99.4.1 / .2       1194            openvpn x2 (TLS, AES-256-GCM)
//   openvpn-cbc    10.99.5.1 / .2       1195            openvpn x2 (static key, AES-128-CBC+SHA1)
//   strongswan     10.99.6.1 / .2       500, 4500       charon x2 (kernel-libipsec)
//   kernel-wireguard 10.99.9.1 / .2     51830           none: the kernel's wireguard module
//   kernel-esp     10.99.10.1 / .2      - (plain ESP)   none: the kernel's XFRM with esp4
//   wireguard-go #2..#4 (a further --wireguard-go)
//                  10.99.21-23.1 / .2   51821-51823     wireguard-go x2
#pragma once

#include "apps/bench/lab/command.hpp"
#include "apps/bench/lab/netns_pair.hpp"
#include "apps/bench/lab/process.hpp"

#include <memory>
#include <string>
#include <sys/types.h>
#include <vector>

namespace esptun::bench::compare {

/// The underlay's addresses (in A, in B), and the prefix of every name a
/// run creates: namespaces "<prefix><pid>-a" / "-b", its /tmp folder.
inline constexpr const char* kUnderA = "10.203.0.1";
inline constexpr const char* kUnderB = "10.203.0.2";
inline constexpr const char* kPrefix = "esptun-cmp-";

/**
 * underlay_layout() - the namespace pair of run @run_id
 *
 *   netns esptun-cmp-PID-a                      netns esptun-cmp-PID-b
 *   cuPIDa 10.203.0.1/24 <-------- veth --------> cuPIDb 10.203.0.2/24
 *
 * Every tunnel under test runs over this veth, each with its own inner
 * subnet; plain veth traffic (the ceiling) goes straight over it.
 */
lab::NetnsPair::Layout underlay_layout(const std::string& run_id);

/// What a subject needs from the run.
struct SubjectEnv {
	const lab::NetnsPair* topo = nullptr;
	std::string run_id;  ///< the per-run tag put into every name this run creates
	std::string scratch; ///< the run's private temp folder
	std::string gateway; ///< path of esptun-gateway
};

/// WireguardGo - one wireguard-go build to measure (--wireguard-go PATH).
struct WireguardGo {
	std::string path;    ///< the program
	std::string version; ///< what its --version says ("v0.0.20250522"); empty: unknown
};

/// SubjectOptions - what the command line chooses about the subjects.
struct SubjectOptions {
	/// wireguard-go builds, in table order; empty: the one in PATH
	std::vector<WireguardGo> wireguard_go;
};

/// Availability - can the subject run on this machine?
struct Availability {
	enum class State { ok, not_installed, skipped };
	State state = State::ok;
	std::string reason; ///< why not (empty when ok)
};

/**
 * Subject - one tunnel (or plain veth) under test
 *
 * start() brings it up and returns once a ping from A reaches dst() in B.
 * The destructor stops its processes (SIGTERM, then SIGKILL) before the
 * NetnsPair removes the namespaces.
 */
class Subject {
public:
	Subject(std::string name, std::string detail) : name_(std::move(name)), detail_(std::move(detail)) {}
	virtual ~Subject() = default;
	Subject(const Subject&) = delete;
	Subject& operator=(const Subject&) = delete;

	const std::string& name() const noexcept { return name_; }
	/// detail() - cipher and mode, for the table
	const std::string& detail() const noexcept { return detail_; }
	/// family() - the --peers name that selects it ("esptun" for both modes)
	virtual std::string family() const { return name_; }
	/// in_default_set() - measured without --peers (false: only when named)
	virtual bool in_default_set() const { return true; }

	/// availability() - installed and usable here? Side effects stay inside
	/// the run's own namespaces (a kernel subject tries its link or SA there).
	virtual Availability availability(const SubjectEnv& env) const = 0;
	/// version() - the version of what is measured ("" when it cannot be told)
	virtual std::string version(const SubjectEnv& env) const = 0;
	/// program() - the program that does the tunnel work ("" for the kernel)
	virtual std::string program(const SubjectEnv&) const { return ""; }
	/// start() - bring the tunnel up; throws with the logs when it cannot
	void start(const SubjectEnv& env);
	/// dst() - the address in B that traffic from A is sent to
	virtual std::string dst() const = 0;
	/// src() - A's address on this subject's network
	virtual std::string src() const = 0;
	/// tunnel_pids() - the processes doing this subject's tunnel work
	std::vector<pid_t> tunnel_pids() const;
	/// has_tunnel() - false only for plain veth (not a peer in the ratios)
	virtual bool has_tunnel() const { return true; }
	/// counts_cpu() - the tunnel's work is done by processes whose CPU time
	/// can be read (false for veth and for the kernel's own tunnels, whose
	/// work runs in softirq and kernel threads shared with everything else)
	virtual bool counts_cpu() const { return has_tunnel(); }
	/// check_alive() - throw when one of the tunnel processes has exited
	void check_alive();
	/// logs_tail() - the end of each process's log, for failure reports
	std::string logs_tail(size_t lines = 8) const;
	/// stop_processes() - stop the tunnel's processes now (also done on destruction)
	void stop_processes() noexcept;

protected:
	/// bring_up() - the subject's own start-up (configs, processes, keys)
	virtual void bring_up(const SubjectEnv& env) = 0;
	/// keep() - own @c as one of the tunnel's processes, logging to @log
	void keep(lab::Child c, const std::string& log);

private:
	std::string name_, detail_;
	std::vector<lab::Child> procs_;
	std::vector<std::string> logs_;
};

/**
 * make_subjects() - every subject, in table order: veth, esptun-direct,
 * esptun-vhost, the esptun variants, wireguard-go (one row per build in
 * @opt), openvpn-gcm, openvpn-cbc, strongswan, kernel-wireguard, kernel-esp
 *
 * One wireguard-go build is the row "wireguard-go"; with several, each row
 * is named after its version ("wireguard-go-0.0.20250522"), or numbered when
 * the versions do not tell them apart.
 */
std::vector<std::unique_ptr<Subject>> make_subjects(const SubjectOptions& opt);

/**
 * wireguard_go_version() - the version @path reports with --version
 * ("v0.0.20250522"), or "" when it reports none
 */
std::string wireguard_go_version(const std::string& path, const std::string& scratch);

} // namespace esptun::bench::compare
