// The tools' command lines on CLI11 (see cli.h).
#include "core/cli.h"

#include <algorithm>
#include <exception>
#include <ostream>

#include "core/config.h"
#include "tpcomm/version.hpp"

namespace tpcomm::cli {

namespace {

std::string hint(std::string_view tool) {
  return "run '" + std::string(tool) + " --help' for usage";
}

// "--nproc_per_node=2" -> "--nproc_per_node"; "-b" -> "-b".
std::string_view flag_name(std::string_view arg) {
  size_t eq = arg.find('=');
  return arg.substr(0, eq == std::string_view::npos ? arg.size() : eq);
}

bool is_long(std::string_view arg) { return arg.size() > 2 && arg.substr(0, 2) == "--"; }

// Every long name of app's options, with dashes ("--nproc-per-node").
std::vector<std::string> long_names(const CLI::App& app) {
  std::vector<std::string> out;
  for (const CLI::Option* o : app.get_options())
    for (const std::string& l : o->get_lnames()) out.push_back("--" + l);
  return out;
}

// The nearest long name by edit distance, else the one sharing the longest start
// (--nprocs -> --nproc-per-node); "" when nothing is close.
std::string nearest(const CLI::App& app, std::string_view name) {
  std::string best, longest;
  size_t best_d = SIZE_MAX, longest_common = 0;
  for (const std::string& f : long_names(app)) {
    size_t d = config::edit_distance(name, f);
    if (d < best_d) best_d = d, best = f;
    size_t common = 0;
    while (common < name.size() && common < f.size() && name[common] == f[common]) ++common;
    if (common > longest_common) longest_common = common, longest = f;
  }
  if (best_d <= std::max<size_t>(3, name.size() / 3)) return best;
  return longest_common >= 6 ? longest : std::string();  // "--" and 4 more characters
}

}  // namespace

std::string version_line(std::string_view tool) {
  return std::string(tool) + " (tpcomm " + version() + "; build: " + build_options() + ")";
}

namespace {

// CLI11's help with the usage lines left to each tool's description.
class Formatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override { return ""; }
};

}  // namespace

void setup(CLI::App& app, std::string_view tool) {
  app.name(std::string(tool));
  app.formatter(std::make_shared<Formatter>());
  // A repeated option: the last one counts, as argparse and getopt have it.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.set_help_flag("-h,--help", "show this help and exit");
  std::string v = version_line(tool);
  app.set_version_flag("--version", v, "show the version and exit");
  app.footer(std::string(tool) + " is part of tpcomm " + version() +
             ". Exit status 2: a bad command line.");
}

const CLI::Option* find_option(const CLI::App& app, std::string_view arg) {
  std::string_view name = flag_name(arg);
  if (name.size() < 2 || name[0] != '-') return nullptr;
  for (const CLI::Option* o : app.get_options()) {
    if (is_long(name)) {
      for (const std::string& l : o->get_lnames())
        if (name.substr(2) == l) return o;
    } else {
      for (const std::string& s : o->get_snames())
        if (name.substr(1, 1) == s) return o;
    }
  }
  return nullptr;
}

void argparse_spellings(const CLI::App& app, std::vector<std::string>& args,
                        std::string_view tool) {
  const std::vector<std::string> names = long_names(app);
  for (size_t i = 0; i < args.size(); ++i) {
    std::string& arg = args[i];
    if (arg == "--" || arg.empty() || arg.front() != '-' || arg == "-") break;
    if (is_long(arg) && !find_option(app, arg)) {
      std::string name(flag_name(arg));
      std::string rest = arg.substr(name.size());
      std::string dashed = name;
      std::replace(dashed.begin() + 2, dashed.end(), '_', '-');
      std::vector<std::string> matches;
      if (std::find(names.begin(), names.end(), dashed) != names.end()) {
        matches = {dashed};
      } else {
        for (const std::string& n : names)
          if (n.compare(0, dashed.size(), dashed) == 0) matches.push_back(n);
      }
      if (matches.size() == 1) {
        arg = matches[0] + rest;
      } else if (matches.size() > 1) {
        std::string list;
        for (const std::string& m : matches) list += (list.empty() ? "" : ", ") + m;
        usage_error(tool, "ambiguous option '" + name + "' (" + list + ")");
      }
    }
    // An option's value is the next argument unless given with '=' (or glued to -x).
    const CLI::Option* opt = find_option(app, arg);
    bool glued = arg.find('=') != std::string::npos || (!is_long(arg) && arg.size() > 2);
    if (opt && opt->get_items_expected_max() > 0 && !glued) ++i;
  }
}

void usage_error(std::string_view tool, const std::string& what) {
  throw UsageError(std::string(tool) + ": " + what + "; " + hint(tool));
}

Parsed parse(CLI::App& app, std::vector<std::string> args, std::string_view tool) {
  std::string suggestion;
  for (const std::string& a : args) {
    if (a == "--") break;
    if (is_long(a) && !find_option(app, a)) {
      std::string near = nearest(app, flag_name(a));
      if (!near.empty()) suggestion = " (did you mean " + near + "?)";
      break;
    }
  }
  std::reverse(args.begin(), args.end());  // CLI11 takes the vector last argument first
  try {
    app.parse(args);
  } catch (const CLI::CallForHelp&) {
    return Parsed::Help;
  } catch (const CLI::CallForVersion&) {
    return Parsed::Version;
  } catch (const CLI::ExtrasError& e) {
    usage_error(tool, e.what() + suggestion);
  } catch (const CLI::ParseError& e) {
    usage_error(tool, e.what());
  }
  return Parsed::Run;
}

int guarded(std::string_view tool, std::ostream& err, const std::function<int()>& body) {
  try {
    return body();
  } catch (const UsageError& e) {
    err << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    err << tool << ": error: " << e.what() << "\n";
    return 1;
  } catch (...) {
    err << tool << ": error: an unknown exception\n";
    return 1;
  }
}

}  // namespace tpcomm::cli
