// One block at a time: its threads are fibers run round robin, each until it blocks (at a
// barrier or a shuffle) or ends. When every thread is blocked the scheduler resolves what can
// be resolved — a warp's shuffle once every lane of its mask is there, the block's barrier once
// every live thread is there — and anything else is a fault: that is how a divergent barrier or
// a lane missing from a shuffle shows. A thread's fault (a misaligned access) is recorded on
// its own stack and thrown from the scheduler's, never across fibers.
#include "emulator/kernel/block_scheduler.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <vector>

#include "emulator/kernel/fiber.h"

namespace towerjit::emulator {
namespace {

constexpr std::size_t kStackBytes = 64 * 1024;
constexpr int kWarp = 32;

struct Thread {
  enum class State { runnable, at_barrier, at_shuffle, done, faulted };
  TjEmuThread info;
  std::unique_ptr<Fiber> fiber;
  State state = State::runnable;
  int line = 0;  // where it waits, or faulted
  int shared_seen = 0;
  unsigned long long work = 0;       // TJ_WORK's count
  unsigned long long tail_work = 0;  // TJ_TAIL_WORK's
  // The shuffle it waits in.
  int kind = 0, arg = 0, width = 32;
  unsigned mask = 0;
  unsigned long long value = 0, result = 0;
};

struct SharedSlot {
  std::size_t offset, bytes;
  int line;
};

struct Block {
  const std::string* kernel = nullptr;
  KernelEntry entry = nullptr;
  void** params = nullptr;
  Fiber scheduler;
  std::vector<Thread> threads;
  std::vector<char> shared;  // static slots from the front, then the dynamic part
  std::vector<SharedSlot> slots;
  std::size_t static_used = 0;
  std::string fault;
  int fault_code = Fault::kLaunchFailed;
  GridStats stats;
};

thread_local Block* current_block = nullptr;
thread_local Thread* current_thread = nullptr;

std::string dims(const dim3& d) {
  return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}

std::string where(const Block& b, const Thread& t) {
  return "kernel " + *b.kernel + ", block " + dims(t.info.blockIdx) + ", thread " + dims(t.info.threadIdx);
}

// Back to the scheduler; returns when the scheduler resumes this thread.
void yield(Thread::State state, int line) {
  Thread& t = *current_thread;
  t.state = state;
  t.line = line;
  Fiber::switch_to(*t.fiber, current_block->scheduler);
}

void thread_main(void* arg) {
  auto* t = static_cast<Thread*>(arg);
  current_block->entry(current_block->params);
  t->state = Thread::State::done;
  Fiber::switch_to(*t->fiber, current_block->scheduler);
}

// --- The table a module calls ----------------------------------------------------------------

const TjEmuThread* api_self() { return &current_thread->info; }

void api_syncthreads(int line) { yield(Thread::State::at_barrier, line); }

unsigned long long api_shuffle(int kind, unsigned mask, unsigned long long value, int arg, int width, int line) {
  Thread& t = *current_thread;
  t.kind = kind, t.mask = mask, t.value = value, t.arg = arg, t.width = width;
  yield(Thread::State::at_shuffle, line);
  return t.result;
}

void api_fail(const char* what, const void* address, int line) {
  {  // gone before the switch: a faulted thread never resumes, so its frames are never unwound
    std::ostringstream m;
    m << what << " at " << address << " (line " << line << " of the module)";
    current_block->fault = m.str();
  }
  current_block->fault_code = Fault::kMisalignedAddress;
  yield(Thread::State::faulted, line);
}

void* api_shared(std::size_t bytes, std::size_t align, int line) {
  Block& b = *current_block;
  Thread& t = *current_thread;
  const std::size_t k = static_cast<std::size_t>(t.shared_seen++);
  if (k < b.slots.size()) {
    const SharedSlot& s = b.slots[k];
    if (s.bytes != bytes || s.line != line) {
      std::ostringstream m;
      m << "__shared__ declaration " << k << " is " << bytes << " bytes at line " << line << " in this thread but "
        << s.bytes << " bytes at line " << s.line << " in another thread of the block";
      b.fault = m.str();
      yield(Thread::State::faulted, line);
    }
    return b.shared.data() + s.offset;
  }
  const std::size_t offset = (b.static_used + align - 1) / align * align;
  if (offset + bytes > kStaticSharedLimit) {
    std::ostringstream m;
    m << "__shared__ declarations need " << offset + bytes << " bytes (line " << line << "), over the "
      << kStaticSharedLimit << " a block may have";
    b.fault = m.str();
    yield(Thread::State::faulted, line);
  }
  b.slots.push_back({offset, bytes, line});
  b.static_used = offset + bytes;
  return b.shared.data() + offset;
}

void* api_dynamic_shared() { return current_block->shared.data() + kStaticSharedLimit; }

void api_work(unsigned long long n) { current_thread->work += n; }
void api_tail_work(unsigned long long n) { current_thread->tail_work += n; }

TjEmuApi the_api{api_self, api_syncthreads, api_shuffle,  api_shared,
                 api_dynamic_shared, api_fail, api_work, api_tail_work};

// --- Resolving what the blocked threads wait for -------------------------------------------------

[[noreturn]] void fault(const Block& b, const Thread& t, const std::string& what, int code = Fault::kLaunchFailed) {
  throw Fault("emulated GPU: " + where(b, t) + ": " + what, code);
}

const char* state_name(const Thread& t) {
  switch (t.state) {
    case Thread::State::at_barrier: return "waits at a __syncthreads";
    case Thread::State::at_shuffle: return "waits in a shuffle";
    case Thread::State::done: return "has exited";
    default: return "runs";
  }
}

// The lane a shuffle of `kind` reads for `lane`, by CUDA's rules: within the lane's segment of
// `width` lanes; an up, down or xor that leaves the segment (going later, for xor) reads the
// lane's own value.
int source_lane(int kind, int lane, int arg, int width) {
  const int base = lane & ~(width - 1);
  switch (kind) {
    case 0: return base + (arg & (width - 1));
    case 1: return lane - arg >= base ? lane - arg : lane;
    case 2: return lane + arg < base + width ? lane + arg : lane;
    default: {
      const int src = lane ^ arg;
      return src < base + width && src < kWarp ? src : lane;
    }
  }
}

// Completes every shuffle whose mask's lanes are all waiting in it. Returns whether any did.
bool resolve_shuffles(Block& b) {
  bool resolved = false;
  const int n = static_cast<int>(b.threads.size());
  for (int w0 = 0; w0 < n; w0 += kWarp) {
    for (int i = w0; i < std::min(n, w0 + kWarp); ++i) {
      Thread& first = b.threads[i];
      if (first.state != Thread::State::at_shuffle) continue;
      const unsigned mask = first.mask;
      // Every lane of the mask must exist and wait in the same shuffle with the same mask.
      bool ready = true;
      for (int lane = 0; lane < kWarp; ++lane) {
        if (!(mask >> lane & 1u)) continue;
        if (w0 + lane >= n)
          fault(b, first, "shuffle at line " + std::to_string(first.line) + " names lane " + std::to_string(lane) +
                              " in its mask, which the block does not have");
        const Thread& other = b.threads[w0 + lane];
        if (other.state == Thread::State::runnable) ready = false;
        else if (other.state != Thread::State::at_shuffle || other.mask != mask || other.line != first.line)
          fault(b, first, "shuffle at line " + std::to_string(first.line) + " with mask 0x" +
                              [&] { std::ostringstream h; h << std::hex << mask; return h.str(); }() +
                              ": lane " + std::to_string(lane) + " " + state_name(other) +
                              (other.state == Thread::State::done ? "" : " at line " + std::to_string(other.line)));
      }
      if (!(mask >> (i - w0) & 1u))
        fault(b, first, "shuffle at line " + std::to_string(first.line) + ": the calling lane is not in its mask");
      if (!ready) continue;
      for (int lane = 0; lane < kWarp; ++lane) {
        if (!(mask >> lane & 1u)) continue;
        Thread& t = b.threads[w0 + lane];
        if (t.width <= 0 || t.width > kWarp || (t.width & (t.width - 1)))
          fault(b, t, "shuffle width " + std::to_string(t.width) + " is not a power of 2 up to 32");
        const int src = source_lane(t.kind, lane, t.arg, t.width);
        if (!(mask >> src & 1u))
          fault(b, t, "shuffle at line " + std::to_string(t.line) + " reads lane " + std::to_string(src) +
                          ", which is not in its mask");
        t.result = b.threads[w0 + src].value;
      }
      for (int lane = 0; lane < kWarp; ++lane)
        if (mask >> lane & 1u) b.threads[w0 + lane].state = Thread::State::runnable;
      resolved = true;
    }
  }
  return resolved;
}

// Releases the barrier when every live thread waits at it, at the same line. Returns whether it
// did; faults on threads waiting at different barriers.
bool resolve_barrier(Block& b) {
  const Thread* first = nullptr;
  for (const Thread& t : b.threads) {
    if (t.state == Thread::State::done) continue;
    if (t.state != Thread::State::at_barrier) return false;
    if (!first) first = &t;
    else if (t.line != first->line)
      fault(b, t, "divergent __syncthreads: this thread waits at line " + std::to_string(t.line) + ", thread " +
                      dims(first->info.threadIdx) + " at line " + std::to_string(first->line));
  }
  if (!first) return false;
  for (Thread& t : b.threads)
    if (t.state == Thread::State::at_barrier) t.state = Thread::State::runnable;
  return true;
}

// Why nothing can go on: the first blocked thread and what it waits for.
[[noreturn]] void deadlock(const Block& b) {
  for (const Thread& t : b.threads)
    if (t.state == Thread::State::at_shuffle)
      fault(b, t, "deadlock: the shuffle at line " + std::to_string(t.line) +
                      " waits for lanes that wait at a barrier");
  for (const Thread& t : b.threads)
    if (t.state == Thread::State::at_barrier)
      fault(b, t, "deadlock at the __syncthreads at line " + std::to_string(t.line));
  throw Fault("emulated GPU: kernel " + *b.kernel + ": deadlock");
}

// A scheduler's fibers, kept per host thread so their stacks are reused from launch to launch.
std::vector<std::unique_ptr<Fiber>>& fiber_pool() {
  thread_local std::vector<std::unique_ptr<Fiber>> pool;
  return pool;
}

void run_block(Block& b, const dim3& block_idx, const LaunchShape& shape) {
  const std::size_t count = static_cast<std::size_t>(shape.block.x) * shape.block.y * shape.block.z;
  auto& pool = fiber_pool();
  while (pool.size() < count) pool.push_back(std::make_unique<Fiber>(thread_main, nullptr, kStackBytes));
  b.threads.clear();
  b.threads.resize(count);
  // Never-written shared memory reads as NaN (all bits set), as never-written device memory.
  std::memset(b.shared.data(), 0xff, b.shared.size());
  b.slots.clear();
  b.static_used = 0;
  for (std::size_t i = 0; i < count; ++i) {
    Thread& t = b.threads[i];
    t.info.blockIdx = block_idx;
    t.info.blockDim = shape.block;
    t.info.gridDim = shape.grid;
    t.info.threadIdx = {static_cast<unsigned>(i % shape.block.x),
                        static_cast<unsigned>(i / shape.block.x % shape.block.y),
                        static_cast<unsigned>(i / (shape.block.x * shape.block.y))};
    t.fiber = std::move(pool[i]);
    t.fiber->reset(thread_main, &t);
  }
  struct GiveBack {  // the fibers return to the pool however the block ends
    Block& b;
    std::vector<std::unique_ptr<Fiber>>& pool;
    ~GiveBack() {
      for (std::size_t i = 0; i < b.threads.size(); ++i) pool[i] = std::move(b.threads[i].fiber);
    }
  } give_back{b, pool};
  for (;;) {
    bool live = false;
    for (Thread& t : b.threads) {
      if (t.state != Thread::State::runnable) continue;
      current_thread = &t;
      Fiber::switch_to(b.scheduler, *t.fiber);
      if (t.state == Thread::State::faulted) fault(b, t, b.fault, b.fault_code);
    }
    for (const Thread& t : b.threads) live |= t.state != Thread::State::done;
    if (!live) {
      for (const Thread& t : b.threads) {
        b.stats.work_max = std::max(b.stats.work_max, t.work);
        b.stats.work_sum += static_cast<double>(t.work);
        b.stats.tail_work_max = std::max(b.stats.tail_work_max, t.tail_work);
        b.stats.tail_work_sum += static_cast<double>(t.tail_work);
      }
      b.stats.threads += b.threads.size();
      b.stats.static_shared_bytes = std::max(b.stats.static_shared_bytes, b.static_used);
      return;
    }
    if (resolve_shuffles(b) || resolve_barrier(b)) continue;
    deadlock(b);
  }
}

}  // namespace

GridStats run_grid(const std::string& kernel, KernelEntry entry, void** params, const LaunchShape& shape) {
  const std::size_t threads = static_cast<std::size_t>(shape.block.x) * shape.block.y * shape.block.z;
  if (threads == 0 || threads > 1024 || shape.grid.x == 0 || shape.grid.y == 0 || shape.grid.z == 0)
    throw Fault("emulated GPU: kernel " + kernel + ": launch of grid " + dims(shape.grid) + " x block " +
                dims(shape.block) + ": a block has 1 to 1024 threads and every grid dimension is at least 1");
  Block b;
  b.kernel = &kernel;
  b.entry = entry;
  b.params = params;
  b.shared.resize(kStaticSharedLimit + shape.dynamic_shared_bytes);
  Block* outer_block = current_block;
  Thread* outer_thread = current_thread;
  current_block = &b;
  struct Restore {
    Block* block;
    Thread* thread;
    ~Restore() { current_block = block, current_thread = thread; }
  } restore{outer_block, outer_thread};
  std::vector<dim3> order;
  for (unsigned z = 0; z < shape.grid.z; ++z)
    for (unsigned y = 0; y < shape.grid.y; ++y)
      for (unsigned x = 0; x < shape.grid.x; ++x) order.push_back({x, y, z});
  // A GPU runs blocks in no order it promises: a kernel that counts on one shows it here.
  if (shape.block_order_seed) std::shuffle(order.begin(), order.end(), std::mt19937_64(shape.block_order_seed));
  for (const dim3& block : order) run_block(b, block, shape);
  return b.stats;
}

TjEmuApi* emulator_api() { return &the_api; }

}  // namespace towerjit::emulator
