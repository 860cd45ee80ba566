#include "runtime/checkpoint/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <vector>

#include "dsl/error.h"
#include "runtime/checkpoint/atomic_file.h"
#include "runtime/checkpoint/checkpoint_format.h"

namespace towerjit {
namespace {

namespace fs = std::filesystem;

std::string checkpoint_name(int64_t step) { return "ckpt-" + std::to_string(step) + ".tjck"; }

// Only names save_checkpoint writes are ever deleted, whatever a damaged `latest` says.
bool is_checkpoint_name(const std::string& name) {
  if (name.size() <= 10 || name.rfind("ckpt-", 0) != 0 || !name.ends_with(".tjck")) return false;
  return std::all_of(name.begin() + 5, name.end() - 5, [](char c) { return c >= '0' && c <= '9'; });
}

// The checkpoints `latest` lists, newest first; none when it is missing.
std::vector<std::string> read_latest(const fs::path& dir) {
  std::ifstream in(dir / "latest");
  std::vector<std::string> names;
  for (std::string line; std::getline(in, line);)
    if (is_checkpoint_name(line) && std::find(names.begin(), names.end(), line) == names.end())
      names.push_back(line);
  return names;
}

std::string read_file(const std::string& path, Loc loc) {
  std::error_code ec;
  user_check(fs::exists(path, ec), loc) << "checkpoint \"" << path << "\" does not exist";
  std::ifstream in(path, std::ios::binary);
  const int err = errno;
  user_check(in.good(), loc) << "cannot read checkpoint \"" << path << "\": " << std::generic_category().message(err);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  user_check(!in.bad(), loc) << "cannot read checkpoint \"" << path << "\": reading failed";
  return std::move(bytes).str();
}

// A directory means its newest checkpoint, as `latest` names it.
std::string resolve(const std::string& path, Loc loc) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return path;
  const fs::path latest = fs::path(path) / "latest";
  user_check(fs::exists(latest, ec), loc)
      << "no checkpoint in \"" << path << "\": it has no \"latest\" file (save_checkpoint writes one); pass "
      << "a directory it saved to, or a ckpt-<step>.tjck file";
  const auto names = read_latest(path);
  user_check(!names.empty(), loc) << "\"" << latest.string()
                                  << "\" names no checkpoint (its first line should be ckpt-<step>.tjck); pass a "
                                     "checkpoint file instead";
  return (fs::path(path) / names.front()).string();
}

std::string describe(const HostTensor& t) { return std::string(dtype_name(t.dtype)) + t.shape.str(); }

}  // namespace

std::string save_checkpoint(const std::string& dir, const Checkpoint& c, int keep, Loc loc) {
  user_check(c.step >= 0, loc) << "cannot save a checkpoint at step " << c.step << ": steps start at 0";
  user_check(keep >= 1, loc) << "keep is " << keep << "; a checkpoint directory keeps at least the newest one";
  // Encoded first: a variable that cannot be saved fails before anything touches the disk.
  const std::string bytes = encode_checkpoint(c, loc);

  std::error_code ec;
  create_directories_durably(dir, ec);
  user_check(!ec, loc) << "cannot create checkpoint directory \"" << dir << "\": " << ec.message()
                       << "; choose a directory you can write";
  user_check(fs::is_directory(dir, ec), loc)
      << "cannot save a checkpoint in \"" << dir << "\": it is not a directory; choose a directory you can write";

  const std::string name = checkpoint_name(c.step);
  const std::string path = (fs::path(dir) / name).string();
  write_file_atomically(path, bytes, loc);

  // Newest first, most recently saved at the front: a run resumed from an older step pushes the
  // abandoned run's later checkpoints out first.
  const std::vector<std::string> listed = read_latest(dir);
  std::vector<std::string> kept = listed, dropped;
  kept.erase(std::remove(kept.begin(), kept.end(), name), kept.end());
  kept.insert(kept.begin(), name);
  if (static_cast<int>(kept.size()) > keep) {
    dropped.assign(kept.begin() + keep, kept.end());
    kept.resize(keep);
  }
  std::string latest;
  for (const auto& n : kept) latest += n + "\n";
  try {
    write_file_atomically((fs::path(dir) / "latest").string(), latest, loc);
  } catch (const Error&) {
    // `latest` still names the previous checkpoints. Nothing prunes a file it never listed, so
    // the new one goes now, unless `latest` lists it (the same step saved again: the old copy
    // is gone already, and this one is as good).
    if (std::find(listed.begin(), listed.end(), name) == listed.end()) fs::remove(path, ec);
    throw;
  }

  // After `latest` moved on: a crash here leaves extra files, never a `latest` naming a
  // deleted one. A file that will not go is only wasted space, not worth failing a save for.
  for (const auto& n : dropped) fs::remove(fs::path(dir) / n, ec);
  return path;
}

int remove_stale_temporaries(const std::string& dir) {
  // The names write_file_atomically gives: "." + the final name + ".tmp-<pid>-<n>".
  auto is_temporary = [](const std::string& name) {
    const size_t tmp = name.find(".tmp-");
    if (name.empty() || name[0] != '.' || tmp == std::string::npos) return false;
    const std::string target = name.substr(1, tmp - 1);
    return is_checkpoint_name(target) || target == "latest" || target == "best.tjck";
  };
  std::error_code ec;
  int removed = 0;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (is_temporary(entry.path().filename().string()) && fs::remove(entry.path(), ec)) ++removed;
  return removed;
}

void write_checkpoint(const std::string& path, const Checkpoint& c, Loc loc) {
  user_check(c.step >= 0, loc) << "cannot save a checkpoint at step " << c.step << ": steps start at 0";
  write_file_atomically(path, encode_checkpoint(c, loc), loc);
}

Checkpoint load_checkpoint(const std::string& path, Loc loc) {
  const std::string file = resolve(path, loc);
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return decode_checkpoint(read_file(file, loc), file, loc);
  // A directory: its newest checkpoint, or, if that one is damaged, the newest older one it
  // keeps that loads, with a warning (nothing is lost that an older checkpoint still holds).
  std::string first_error;
  for (const std::string& name : read_latest(path)) {
    const std::string candidate = (fs::path(path) / name).string();
    try {
      Checkpoint c = decode_checkpoint(read_file(candidate, loc), candidate, loc);
      if (!first_error.empty())
        std::fprintf(stderr, "towerjit: warning: %s; resuming from the older %s instead\n", first_error.c_str(),
                     candidate.c_str());
      return c;
    } catch (const Error& e) {
      if (first_error.empty()) first_error = e.what();
    }
  }
  throw Error(first_error + (read_latest(path).size() > 1 ? "; no older checkpoint in the directory loads either" : ""));
}

void check_matches(const Checkpoint& c, const HostVariables& model, Loc loc) {
  std::vector<std::string> problems;  // in name order: both maps are sorted
  for (const auto& [name, t] : model) {
    const auto it = c.variables.find(name);
    if (it == c.variables.end())
      problems.push_back("the checkpoint lacks variable \"" + name + "\" (" + describe(t) + ") that the model has");
    else if (it->second.dtype != t.dtype || it->second.shape != t.shape)
      problems.push_back("variable \"" + name + "\" is " + describe(it->second) + " in the checkpoint but " +
                         describe(t) + " in the model" +
                         (it->second.shape == t.shape && is_real(it->second.dtype) && is_real(t.dtype)
                              ? " (another precision: resume_from converts it unless asked for CheckpointPrecision::exact)"
                              : ""));
  }
  for (const auto& [name, t] : c.variables)
    if (!model.count(name))
      problems.push_back("the checkpoint has variable \"" + name + "\" (" + describe(t) +
                         ") that the model lacks");
  user_check(problems.empty(), loc)
      << "the checkpoint does not fit the model: " << (problems.empty() ? "" : problems.front())
      << (problems.size() == 2 ? " (and 1 more difference)" : "")
      << (problems.size() > 2 ? " (and " + std::to_string(problems.size() - 1) + " more differences)" : "")
      << "; was it saved from another model, optimiser or strategy?";
}

}  // namespace towerjit
