// The shared command line: see options.hpp.
#include "apps/cli/options.hpp"

#include <cstdio>
#include <exception>
#include <vector>

namespace esptun::cli {
namespace {

/// deepest_verb() - the innermost subcommand the parse reached, or @app
const CLI::App& deepest_verb(const CLI::App& app) {
	const auto chosen = app.get_subcommands();
	return chosen.empty() ? app : deepest_verb(*chosen.front());
}

/// verb_names() - "run, check, status" : the subcommands of @app
std::string verb_names(const CLI::App& app) {
	std::string names;
	for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
		names += (names.empty() ? "" : ", ") + sub->get_name();
	return names;
}

/**
 * word_after() - the first argument after @verb's own name (and its
 * parents') that is not an option: the command @verb did not know
 */
std::string word_after(const CLI::App& verb, int argc, const char* const* argv) {
	std::vector<std::string> chain;
	for (const CLI::App* a = &verb; a->get_parent(); a = a->get_parent())
		chain.insert(chain.begin(), a->get_name());
	size_t matched = 0;
	for (int i = 1; i < argc; i++) {
		const std::string a = argv[i];
		if (a.empty() || a[0] == '-') continue;
		if (matched < chain.size() && a == chain[matched]) {
			matched++;
			continue;
		}
		if (matched == chain.size()) return a;
	}
	return "";
}

} // namespace

std::unique_ptr<CLI::App> make_app(const std::string& program, const std::string& description) {
	auto app = std::make_unique<CLI::App>(description, program);
	app->set_version_flag("--version", program + " " + ESPTUN_VERSION, "print the version");
	app->set_help_flag("-h,--help", "print this help");
	app->option_defaults()->always_capture_default();
	app->get_formatter()->column_width(30);
	return app;
}

CLI::App* add_verb(CLI::App& parent, const std::string& name, const std::string& summary,
                   const std::string& details) {
	CLI::App* verb = parent.add_subcommand(name, summary);
	// CLI11 prints a footer without a line end of its own.
	if (!details.empty()) verb->footer(details.back() == '\n' ? details : details + "\n");
	return verb;
}

std::string full_name(const CLI::App& verb) {
	return verb.get_parent() ? full_name(*verb.get_parent()) + " " + verb.get_name() : verb.get_name();
}

int report_usage_error(const CLI::App& verb, const std::string& message) {
	std::fprintf(stderr, "%s: %s\n(%s --help lists the options)\n", full_name(verb).c_str(),
	             message.c_str(), full_name(verb).c_str());
	return kExitUsage;
}

int parse_command_line(CLI::App& app, int argc, const char* const* argv) {
	try {
		app.parse(argc, argv);
		return -1;
	} catch (const CLI::ParseError& e) {
		if (e.get_exit_code() == 0) return app.exit(e); // --help, --version: stdout, 0
		const CLI::App& verb = deepest_verb(app);
		// CLI11 says "A subcommand is required" both when none was given and
		// when the one given is not known: say which.
		if (dynamic_cast<const CLI::RequiredError*>(&e) && verb.get_subcommands().empty() &&
		    !verb.get_subcommands([](const CLI::App*) { return true; }).empty()) {
			const std::string word = word_after(verb, argc, argv);
			if (word.empty())
				return report_usage_error(verb, "which command? one of " + verb_names(verb));
			return report_usage_error(verb, "unknown command '" + word +
			                                    "' (commands: " + verb_names(verb) + ")");
		}
		return report_usage_error(verb, e.what());
	}
}

int run_verb(const CLI::App& verb, const std::function<int()>& body) {
	try {
		return body();
	} catch (const UsageError& e) {
		return report_usage_error(verb, e.what());
	} catch (const std::exception& e) {
		std::fprintf(stderr, "%s: %s\n", full_name(verb).c_str(), e.what());
		return kExitFailure;
	}
}

CLI::Validator between(long long lo, long long hi) {
	const std::string range = std::to_string(lo) + " to " + std::to_string(hi);
	return CLI::Validator(
	    [lo, hi, range](std::string& text) -> std::string {
		    long long v = 0;
		    if (!CLI::detail::lexical_cast(text, v) || v < lo || v > hi)
			    return "wants a whole number from " + range + ", not '" + text + "'";
		    return "";
	    },
	    "in " + std::to_string(lo) + ".." + std::to_string(hi));
}

} // namespace esptun::cli
