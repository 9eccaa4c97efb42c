#include "build.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>

#include "run_command.h"
#include "support.h"

namespace grader {

namespace fs = std::filesystem;

// "NAME-HASH" for a submission's canonical path: the folder's name for people, and a 64-bit
// FNV-1a hash of the whole path (stable across runs and compilers) so two students' folders
// with the same name never share a build.
std::string build_folder_name(const std::string& canonical_submission) {
  std::uint64_t hash = 14695981039346656037ULL;
  for (unsigned char c : canonical_submission) {
    hash ^= c;
    hash *= 1099511628211ULL;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
  std::string name = fs::path(canonical_submission).filename().string();
  if (name.empty()) name = "root";
  return name + "-" + std::string(hex, 8);
}

/// The compiler's complaints from a build log: each line naming an error with a little
/// context, at most `max_lines`.
std::string compiler_errors(const std::string& log, std::size_t max_lines) {
  std::stringstream in(log);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::string out;
  std::size_t kept = 0;
  std::set<std::size_t> shown;
  for (std::size_t i = 0; i < lines.size() && kept < max_lines; ++i) {
    if (lines[i].find("error") == std::string::npos && lines[i].find("Error") == std::string::npos)
      continue;
    for (std::size_t j = i == 0 ? 0 : i - 1; j < std::min(lines.size(), i + 4); ++j) {
      if (shown.insert(j).second && kept < max_lines) {
        out += lines[j] + "\n";
        ++kept;
      }
    }
  }
  if (out.empty()) {
    out = lines.size() > max_lines ? "...\n" : "";
    for (std::size_t i = lines.size() > max_lines ? lines.size() - max_lines : 0; i < lines.size(); ++i)
      out += lines[i] + "\n";
  }
  return out;
}

/// Stage directories of `root`: stage*-* holding a CMakeLists.txt, sorted.
std::vector<StageInfo> discover_stages(const std::string& root) {
  std::vector<StageInfo> stages;
  for (const auto& entry : fs::directory_iterator(root)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || name.rfind("stage", 0) != 0 || name.find('-') == std::string::npos ||
        !fs::exists(entry.path() / "CMakeLists.txt")) {
      continue;
    }
    StageInfo stage;
    stage.dir = name;
    stage.number = std::atoi(name.c_str() + 5);
    stages.push_back(stage);
  }
  std::sort(stages.begin(), stages.end(),
            [](const StageInfo& a, const StageInfo& b) { return a.dir < b.dir; });
  return stages;
}

/// Configures `source` into `dir` for `build` and builds each stage's target; fills in the
/// binaries that built and the errors of those that did not. Never writes into `source`.
void build_submission(const std::string& source, const std::string& dir, const std::string& build,
                      std::vector<StageInfo>& stages, int jobs) {
  fs::create_directories(dir);
  const std::string type = build == "debug" ? "Debug" : "RelWithDebInfo";
  const std::string sanitizer = build == "tsan" ? "thread" : "";
  const std::string configure_log = dir + "/configure.log";
  std::string cmd = "cmake -S " + shell_quote(source) + " -B " + shell_quote(dir) +
                    " -G Ninja -DCMAKE_BUILD_TYPE=" + type + " -DSANITIZER=" + sanitizer +
                    " -DPROXY_BUILD_TESTS=OFF > " + shell_quote(configure_log) + " 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    std::string errors = compiler_errors(slurp(configure_log));
    for (StageInfo& stage : stages) stage.build_errors[build] = "cmake could not configure:\n" + errors;
    return;
  }
  for (StageInfo& stage : stages) {
    const std::string log = dir + "/build-" + stage.dir + ".log";
    std::string b = "cmake --build " + shell_quote(dir) + " --target " + stage.dir + " -j " +
                    std::to_string(jobs) + " > " + shell_quote(log) + " 2>&1";
    const std::string binary = dir + "/bin/" + stage.dir;
    if (std::system(b.c_str()) == 0 && fs::exists(binary)) {
      stage.binaries[build] = fs::absolute(binary).string();
    } else {
      stage.build_errors[build] = compiler_errors(slurp(log));
    }
  }
}

bool offers_workers(const std::string& binary) {
  return harness::run_command(shell_quote(binary) + " --help 2>&1").text.find("--workers") !=
         std::string::npos;
}

bool declares_workers(const std::string& stage_dir) {
  if (!fs::is_directory(stage_dir)) return false;
  for (const auto& entry : fs::recursive_directory_iterator(stage_dir)) {
    const std::string ext = entry.path().extension().string();
    if (!entry.is_regular_file() ||
        (ext != ".cpp" && ext != ".cc" && ext != ".h" && ext != ".hpp")) {
      continue;
    }
    if (slurp(entry.path().string()).find("\"--workers\"") != std::string::npos) return true;
  }
  return false;
}

void forget_other_source(const std::string& dir, const std::string& source) {
  const std::string cache = slurp(dir + "/CMakeCache.txt");
  const std::string key = "CMAKE_HOME_DIRECTORY:INTERNAL=";
  const std::size_t at = cache.find(key);
  if (at == std::string::npos) return;
  const std::size_t end = cache.find('\n', at);
  const std::string home = cache.substr(at + key.size(), end == std::string::npos
                                                            ? std::string::npos
                                                            : end - at - key.size());
  std::error_code ec;
  if (!fs::equivalent(home, source, ec)) fs::remove_all(dir);
}

}  // namespace grader
