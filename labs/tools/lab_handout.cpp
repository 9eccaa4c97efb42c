// lab-handout: writes a lab's starter tree from the reference (make handout LAB=N), and answers
// questions about labs/manifest.json for the make-test checks (labs/tools/check-starter.sh).
//
// Lab regions in the reference (C++ sources and headers):
//
//     // LAB(3) BEGIN BoundedQueue::pop      <- lab number, a name for the region
//     ...reference code...                   <- kept in the handouts of later labs
//     // LAB(3) STUB
//     // throw std::logic_error("TODO(student) lab 3: ...");   <- commented in the reference,
//     // LAB(3) END                                               uncommented in the starter
//
// In the handout of lab N, a region of lab K >= N becomes its stub (each line loses the `// `
// after its indentation) under one `// TODO(student)` line; a region of lab K < N keeps its
// reference code. Marker and stub lines never reach a handout of an earlier lab's reference.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

/// Writes `text` to `path` only when it differs, so that a regenerated tree keeps the mtimes of
/// unchanged files and an incremental build of it recompiles only what a lab changed.
void write_if_changed(const fs::path& path, const std::string& text) {
  if (fs::exists(path) && slurp(path) == text) return;
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

struct Region {
  std::string file;
  int line = 0;
  int lab = 0;
  std::string name;
};

/// What a stub's TODO(student) line points the student at: a lab's handout and hints file.
struct LabDocs {
  std::string dir;    ///< the handout's folder, e.g. labs/lab3-pool (README.md in it)
  std::string hints;  ///< its hints file, e.g. labs/lab3-pool/HINTS.md; empty when none
};

/// Rewrites `text` for the handout of `lab` (0: validate only, keep everything). Throws
/// std::runtime_error naming file:line on a malformed region. Appends each region to `regions`.
/// `lab_docs` (by lab number) fills each stub's TODO(student) line.
std::string transform(const std::string& text, const std::string& file, int lab,
                      std::vector<Region>& regions, const std::map<int, LabDocs>& lab_docs = {}) {
  static const std::regex begin_re(R"(^(\s*)// LAB\((\d+)\) BEGIN (\S.*)$)");
  static const std::regex stub_re(R"(^\s*// LAB\((\d+)\) STUB\s*$)");
  static const std::regex end_re(R"(^\s*// LAB\((\d+)\) END\s*$)");
  enum class State { outside, reference, stub } state = State::outside;
  Region open;
  std::string indent;
  std::string pending_todo;  // a stubbed region's TODO line, not yet written
  bool stubbed = false;
  std::string out;
  std::stringstream in(text);
  int number = 0;
  auto fail = [&](const std::string& why) {
    throw std::runtime_error(file + ":" + std::to_string(number) + ": " + why);
  };
  bool last_newline = !text.empty() && text.back() == '\n';
  for (std::string line; std::getline(in, line);) {
    ++number;
    std::smatch m;
    if (std::regex_match(line, m, begin_re)) {
      if (state != State::outside) fail("LAB BEGIN inside the region opened at line " + std::to_string(open.line));
      open = Region{file, number, std::stoi(m[2]), m[3]};
      indent = m[1];
      state = State::reference;
      stubbed = lab > 0 && open.lab >= lab;
      if (stubbed) {
        auto docs = lab_docs.find(open.lab);
        const bool known = docs != lab_docs.end();
        // Written with the first stub line: an empty stub (a helper only the reference used)
        // has no stub to replace, and gets the line at END instead.
        pending_todo = indent + "// TODO(student) lab " + std::to_string(open.lab) + ": " + open.name +
                       ". Replace this stub with your code (" + (known ? docs->second.dir : std::string("labs")) +
                       "/README.md" + (known && !docs->second.hints.empty() ? "; stuck? " + docs->second.hints : "") +
                       ").\n";
      }
      continue;
    }
    if (std::regex_match(line, m, stub_re)) {
      if (state != State::reference || std::stoi(m[1]) != open.lab) fail("LAB STUB without its LAB(" + std::string(m[1]) + ") BEGIN");
      state = State::stub;
      continue;
    }
    if (std::regex_match(line, m, end_re)) {
      if (state != State::stub || std::stoi(m[1]) != open.lab) fail("LAB END without its BEGIN and STUB");
      if (!pending_todo.empty()) {
        out += indent + "// Lab " + std::to_string(open.lab) + ": the reference had a helper here (" + open.name +
               "); write your own helpers as you like.\n";
        pending_todo.clear();
      }
      regions.push_back(open);
      state = State::outside;
      continue;
    }
    const std::size_t first = line.find_first_not_of(" \t");
    if (state == State::outside && first != std::string::npos && line.compare(first, 7, "// LAB(") == 0) {
      fail("a line that looks like a lab marker but is not one: " + line);
    }
    switch (state) {
      case State::outside:
        out += line + "\n";
        break;
      case State::reference:
        if (lab == 0 || !stubbed) out += line + "\n";
        break;
      case State::stub: {
        if (line.compare(0, indent.size(), indent) != 0 || line.compare(indent.size(), 2, "//") != 0) {
          fail("a stub line must start with the region's indentation and `//`");
        }
        if (lab == 0) {
          out += line + "\n";
        } else if (stubbed) {
          out += pending_todo;
          pending_todo.clear();
          std::string rest = line.substr(indent.size() + 2);
          if (!rest.empty() && rest[0] == ' ') rest.erase(0, 1);
          out += rest.empty() ? "\n" : indent + rest + "\n";
        }
        break;
      }
    }
  }
  if (state != State::outside) {
    number = open.line;
    fail("LAB(" + std::to_string(open.lab) + ") BEGIN " + open.name + " never ends");
  }
  if (!last_newline && !out.empty()) out.pop_back();
  return out;
}

bool is_source(const fs::path& p) {
  const std::string ext = p.extension().string();
  return ext == ".cpp" || ext == ".h" || ext == ".hpp" || ext == ".cc";
}

json load_manifest(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read the manifest " + path);
  json manifest = json::parse(in);
  if (!manifest.contains("labs") || !manifest["labs"].is_array()) {
    throw std::runtime_error(path + ": no \"labs\" array");
  }
  return manifest;
}

const json& find_lab(const json& manifest, int lab) {
  for (const json& l : manifest["labs"]) {
    if (l.at("number").get<int>() == lab) return l;
  }
  throw std::runtime_error("the manifest has no lab " + std::to_string(lab));
}

/// Every lab's hidden test sources: never shipped in any handout.
std::set<std::string> hidden_sources(const json& manifest) {
  std::set<std::string> hidden;
  for (const json& l : manifest["labs"]) {
    for (const json& s : l.value("hidden_sources", json::array())) hidden.insert(s.get<std::string>());
  }
  return hidden;
}

/// The lab's handout (DIR/README.md) and, when the manifest names one, its hints file: what a
/// student reads, so every starter tree must hold them.
std::vector<std::string> handout_docs(const json& entry) {
  std::vector<std::string> docs{entry.value("dir", "labs") + "/README.md"};
  if (entry.contains("hints")) docs.push_back(entry.at("hints").get<std::string>());
  return docs;
}

/// Writes the handout of `lab` from `source` to `out`; returns the regions it met.
std::vector<Region> generate(const fs::path& source, const fs::path& out, int lab, const json& manifest) {
  const std::set<std::string> hidden = hidden_sources(manifest);
  std::map<int, LabDocs> lab_docs;
  for (const json& l : manifest["labs"]) {
    lab_docs[l.at("number").get<int>()] = LabDocs{l.value("dir", "labs"), l.value("hints", "")};
  }
  std::vector<Region> regions;
  for (auto it = fs::recursive_directory_iterator(source); it != fs::recursive_directory_iterator(); ++it) {
    const fs::path relative = fs::relative(it->path(), source);
    const std::string rel = relative.generic_string();
    const std::string top = relative.begin()->string();
    // Build products, version control and measurement output never ship; neither do the
    // hidden tests nor the grader's planted-bug patches (they would give the answers away).
    if (top == "build" || top == "results" || top == ".git" || rel == "grader/mutants" ||
        hidden.count(rel)) {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (it->is_directory()) {
      fs::create_directories(out / relative);
    } else if (it->is_regular_file()) {
      std::string text = slurp(it->path());
      if (is_source(it->path()) && text.find("// LAB(") != std::string::npos) {
        text = transform(text, rel, lab, regions, lab_docs);
      }
      write_if_changed(out / relative, text);
      fs::permissions(out / relative, fs::status(it->path()).permissions());
    }
  }
  return regions;
}

/// --print: one line per item of what `what` names in lab `entry` of the manifest.
void print_manifest(const json& entry, const std::string& what) {
  if (what == "tests") {
    for (const json& t : entry.at("tests")) {
      std::cout << t.at("binary").get<std::string>() << "\t" << t.at("filter").get<std::string>()
                << "\t" << t.value("visibility", "visible") << "\t" << t.at("id").get<std::string>() << "\n";
    }
  } else if (what == "docs") {
    for (const std::string& doc : handout_docs(entry)) std::cout << doc << "\n";
  } else {  // "stages" or "graded"
    for (const json& s : entry.at(what == "stages" ? "stages" : "graded_files")) {
      std::cout << s.get<std::string>() << "\n";
    }
  }
}

/// --list-regions: every lab region of the reference, "file:line TAB lab TAB name", by file
/// and line.
void list_regions(const fs::path& source) {
  std::vector<Region> regions;
  for (auto it = fs::recursive_directory_iterator(source); it != fs::recursive_directory_iterator(); ++it) {
    const std::string top = fs::relative(it->path(), source).begin()->string();
    if (top == "build" || top == ".git" || top == "results") {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file() && is_source(it->path())) {
      std::string text = slurp(it->path());
      if (text.find("// LAB(") != std::string::npos) {
        transform(text, fs::relative(it->path(), source).generic_string(), 0, regions);
      }
    }
  }
  std::sort(regions.begin(), regions.end(), [](const Region& a, const Region& b) {
    return a.file != b.file ? a.file < b.file : a.line < b.line;
  });
  for (const Region& r : regions) std::cout << r.file << ":" << r.line << "\t" << r.lab << "\t" << r.name << "\n";
}

/// True when `out` may take a handout: not the reference tree itself (the stubs would replace
/// its code) nor a folder the copy walks (it would copy itself): only under build/ or
/// results/, or outside.
bool safe_destination(const std::string& source, const std::string& out) {
  const fs::path src = fs::weakly_canonical(source);
  const fs::path dst = fs::weakly_canonical(out);
  const fs::path inside = dst.lexically_relative(src);
  const std::string top = inside.empty() ? "" : inside.begin()->string();
  return dst != src && (inside.empty() || top == ".." || top == "build" || top == "results");
}

/// Writes lab `lab`'s starter tree to `out` and says what it wrote. Throws when the tree lacks
/// the handout or hints file the manifest names.
void write_handout(const std::string& source, const std::string& out, int lab, const json& manifest,
                   const json& entry) {
  const std::vector<Region> regions = generate(source, out, lab, manifest);
  // A starter without its handout or hints would leave the student with stubs and no text.
  for (const std::string& doc : handout_docs(entry)) {
    if (!fs::is_regular_file(fs::path(out) / doc)) {
      throw std::runtime_error("the handout tree has no " + doc + " (labs/manifest.json names it)");
    }
  }
  // Tells the tree's CMake (labs/CMakeLists.txt) and the grader that this is a handout.
  write_if_changed(fs::path(out) / "labs" / "HANDOUT",
                   "lab " + std::to_string(lab) + " starter, generated by lab-handout from the reference\n");
  int stubbed = 0;
  for (const Region& r : regions) stubbed += r.lab >= lab ? 1 : 0;
  std::cout << "lab " << lab << " (" << entry.value("dir", "") << "): " << out << " written; "
            << stubbed << " of " << regions.size() << " lab regions are TODO(student) stubs; for the student:";
  for (const std::string& doc : handout_docs(entry)) std::cout << " " << doc;
  std::cout << "\n";
}

/// --tar: OUT.tar.gz beside the tree, without its build/.
void write_tarball(const std::string& out) {
  const fs::path dir = fs::absolute(out).lexically_normal();
  const std::string name = dir.filename().string();
  const std::string tar = dir.string() + ".tar.gz";
  const std::string cmd = "tar -czf '" + tar + "' -C '" + dir.parent_path().string() + "' --exclude='" +
                          name + "/build' '" + name + "'";
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("tar failed: " + cmd);
  std::cout << tar << " written\n";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lab-handout: writes lab N's starter tree from the reference (every region of lab "
               "N and later replaced by its TODO(student) stub), or prints what the manifest says "
               "about lab N", "lab-handout"};
  int lab = 0;
  std::string source = ".";
  std::string out;
  std::string manifest_path;
  bool tarball = false;
  bool regions_only = false;
  std::string print;
  app.add_option("--lab", lab, "The lab number (1-4)")->required();
  app.add_option("--source", source, "The reference tree")->capture_default_str();
  app.add_option("--out", out, "Where to write the starter tree (files that did not change keep their mtime)");
  app.add_option("--manifest", manifest_path, "Default: SOURCE/labs/manifest.json");
  app.add_flag("--tar", tarball, "Also write OUT.tar.gz (the tree without its build/)");
  app.add_flag("--list-regions", regions_only, "Print every lab region of SOURCE (file:line lab name) and exit");
  app.add_option("--print", print,
                 "Print one line per test group of lab N and exit: 'tests' (binary TAB filter "
                 "TAB visibility TAB id), 'stages', 'graded' or 'docs' (the handout and its hints "
                 "file)")
      ->check(CLI::IsMember({"tests", "stages", "graded", "docs"}));
  CLI11_PARSE(app, argc, argv);
  try {
    if (manifest_path.empty()) manifest_path = (fs::path(source) / "labs" / "manifest.json").string();
    const json manifest = load_manifest(manifest_path);
    const json& entry = find_lab(manifest, lab);
    if (!print.empty()) {
      print_manifest(entry, print);
      return 0;
    }
    if (regions_only) {
      list_regions(source);
      return 0;
    }
    if (out.empty()) {
      std::cerr << "lab-handout: --out is required to write a handout\n";
      return 2;
    }
    if (!safe_destination(source, out)) {
      std::cerr << "lab-handout: --out " << out << " is the reference tree or inside it; write "
                << "the handout outside it or under its build/ (make handout: build/handout/)\n";
      return 2;
    }
    write_handout(source, out, lab, manifest, entry);
    if (tarball) write_tarball(out);
  } catch (const std::exception& e) {
    std::cerr << "lab-handout: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
