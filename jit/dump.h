// What TOWERJIT_DUMP writes besides each kernel's source: an index saying which DSL ops (with
// the user's file:line) went into which kernel, its loop shape and the bytes it moves, and the
// kernel IR as text. The CUDA backend writes the same index next to its .cu files.
#pragma once

#include <string>

#include "dsl/graph.h"
#include "jit/kir/kernel_ir.h"

namespace towerjit {

// The index as JSON: {"module", "steps": [{"kind", "name", "space", "ops": [{"op", "at",
// "scope"}], "bytes_read", "bytes_written"}], "buffers": [...]}. Sizes that depend on the batch
// are written as expressions of B ("3136*B").
std::string dump_index_json(const Graph& graph, const kir::Program& program,
                            const std::string& module);

// The name a compiled program's files go under: `program` ("tower_step", "apply", "predict"),
// or "<program>_2", "_3", ... when other programs of that name, with other `content` (the
// program's text), were named before in this process. The same content keeps its name, so the
// towers' copies of one program share their files. Thread-safe.
std::string dump_stem(const std::string& program, const std::string& content);

}  // namespace towerjit
