// CUDA tensors through a process group by staging: see cuda_staging.h.
#include "pg/cuda_staging.h"

#include <mutex>
#include <string>
#include <vector>

#include "cuda/staging.h"
#include "pg/coll_run.h"

namespace tpcomm::detail {

namespace {

using Copies = std::vector<std::pair<std::unique_ptr<cuda::Staged>, bool>>;  // (copy, out)

// Pinned copies of operations whose Work was dropped before they completed: a transport may
// still read or write them, so they stay out of the pool until the operation is done. Each
// staged call first lets go of those whose operation has completed since.
struct Orphans {
  std::mutex mu;
  std::vector<std::pair<std::shared_ptr<Work>, Copies>> list;
};

Orphans& orphans() {
  static auto* o = new Orphans;  // never destroyed: operations may be in flight at exit
  return *o;
}

void reap_orphans() {
  Orphans& o = orphans();
  std::lock_guard<std::mutex> lock(o.mu);
  std::erase_if(o.list, [](auto& entry) { return entry.first->is_completed(); });
}

// The Work of a staged operation: the host operation's Work, plus the pinned copies it uses
// (kept until the operation and the copies back are done). When the host operation completed
// successfully, the first wait() or is_completed() that sees it queues the copies back.
class StagedWork final : public Work {
 public:
  StagedWork(std::shared_ptr<Work> inner, Copies copies)
      : inner_(std::move(inner)), copies_(std::move(copies)) {}
  ~StagedWork() override {
    if (copies_.empty() || inner_->is_completed()) return;
    std::lock_guard<std::mutex> lock(orphans().mu);
    orphans().list.emplace_back(std::move(inner_), std::move(copies_));
  }

  bool wait(std::optional<std::chrono::milliseconds> timeout) override {
    inner_->wait(timeout);
    finish();
    return true;
  }
  bool is_completed() override {
    if (!inner_->is_completed()) return false;
    if (inner_->is_success()) finish();
    return true;
  }
  bool is_success() override { return inner_->is_success(); }
  std::exception_ptr exception() override { return inner_->exception(); }
  int source_rank() override { return inner_->source_rank(); }
  void synchronize(std::optional<std::chrono::milliseconds> timeout) override {
    wait(timeout);
    for (auto& [copy, out] : copies_)
      if (out) copy->synchronize();
  }

 private:
  void finish() {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    done_ = true;
    for (auto& [copy, out] : copies_)
      if (out) copy->copy_out();
  }

  std::shared_ptr<Work> inner_;
  Copies copies_;
  std::mutex mu_;
  bool done_ = false;
};

// One staged call: stage() each tensor, run the operation on the host copies, then finish().
class Call {
 public:
  Call(ProcessGroup& pg, const char* op, void* stream, bool async)
      : where_(std::string(op) + " (rank " + std::to_string(pg.rank()) + "): "),
        stream_(stream),
        async_(async) {
    reap_orphans();
  }
  Call(ProcessGroup& pg, const char* op, const CollectiveOptions& o)
      : Call(pg, op, o.stream, o.async_op) {
    host_ = o;
    host_.stream = nullptr;
  }

  /// `t` itself for a CPU tensor; else its pinned copy (copied in when `in`, back when `out`).
  Tensor stage(const Tensor& t, const char* what, bool in, bool out) {
    if (!is_cuda(t)) return t;
    auto s = std::make_unique<cuda::Staged>(t, stream_, in, where_ + what);
    Tensor h = s->host();
    copies_.emplace_back(std::move(s), out);
    return h;
  }
  std::vector<Tensor> stage(const std::vector<Tensor>& list, const char* what, bool in, bool out) {
    std::vector<Tensor> h;
    h.reserve(list.size());
    for (const Tensor& t : list) h.push_back(stage(t, what, in, out));
    return h;
  }
  const CollectiveOptions& host_options() const { return host_; }

  /// The caller's Work: the copies back are queued on return for a blocking call, when the
  /// operation is seen complete for an async one.
  std::shared_ptr<Work> finish(std::shared_ptr<Work> inner) {
    auto w = std::make_shared<StagedWork>(std::move(inner), std::move(copies_));
    if (async_) return w;
    w->wait(std::nullopt);
    return w;  // completed; keeps source_rank() for a receive
  }

 private:
  std::string where_;
  void* stream_;
  bool async_;
  CollectiveOptions host_;
  Copies copies_;
};

}  // namespace

bool any_cuda(const std::vector<Tensor>& list) {
  for (const Tensor& t : list)
    if (is_cuda(t)) return true;
  return false;
}

std::shared_ptr<Work> staged_send(ProcessGroup& pg, const Tensor& t, int dst, int tag, bool async) {
  Call c(pg, async ? "isend" : "send", nullptr, async);
  Tensor h = c.stage(t, "tensor", true, false);
  return c.finish(async ? pg.isend(h, dst, tag) : pg.send(h, dst, tag));
}

std::shared_ptr<Work> staged_recv(ProcessGroup& pg, const Tensor& t, int src, int tag, bool async) {
  Call c(pg, async ? "irecv" : "recv", nullptr, true);
  Tensor h = c.stage(t, "tensor", false, true);
  auto w = c.finish(pg.irecv(h, src, tag));
  if (!async) w->wait(std::nullopt);
  return w;
}

std::shared_ptr<Work> staged_broadcast(ProcessGroup& pg, const Tensor& t, int src,
                                       const CollectiveOptions& o) {
  Call c(pg, "broadcast", o);
  Tensor h = c.stage(t, "tensor", pg.rank() == src, pg.rank() != src);
  return c.finish(pg.broadcast(h, src, c.host_options()));
}

std::shared_ptr<Work> staged_all_reduce(ProcessGroup& pg, const Tensor& t, ReduceOp op,
                                        const CollectiveOptions& o) {
  Call c(pg, "all_reduce", o);
  Tensor h = c.stage(t, "input", true, true);
  return c.finish(pg.all_reduce(h, op, c.host_options()));
}

std::shared_ptr<Work> staged_reduce(ProcessGroup& pg, const Tensor& t, int dst, ReduceOp op,
                                    const CollectiveOptions& o) {
  Call c(pg, "reduce", o);
  Tensor h = c.stage(t, "tensor", true, pg.rank() == dst);
  return c.finish(pg.reduce(h, dst, op, c.host_options()));
}

std::shared_ptr<Work> staged_all_gather(ProcessGroup& pg, const std::vector<Tensor>& outputs,
                                        const Tensor& input, const CollectiveOptions& o) {
  Call c(pg, "all_gather", o);
  Tensor in = c.stage(input, "input", true, false);
  auto out = c.stage(outputs, "output_list entry", false, true);
  return c.finish(pg.all_gather(out, in, c.host_options()));
}

std::shared_ptr<Work> staged_all_gather_into_tensor(ProcessGroup& pg, const Tensor& output,
                                                    const Tensor& input,
                                                    const CollectiveOptions& o) {
  Call c(pg, "all_gather_into_tensor", o);
  Tensor in = c.stage(input, "input", true, false);
  Tensor out = c.stage(output, "output", false, true);
  return c.finish(pg.all_gather_into_tensor(out, in, c.host_options()));
}

std::shared_ptr<Work> staged_gather(ProcessGroup& pg, const Tensor& input,
                                    const std::vector<Tensor>& gather_list, int dst,
                                    const CollectiveOptions& o) {
  Call c(pg, "gather", o);
  Tensor in = c.stage(input, "input", true, false);
  // The list is used on the destination only (other ranks may pass anything).
  std::vector<Tensor> list =
      pg.rank() == dst ? c.stage(gather_list, "gather_list entry", false, true) : gather_list;
  return c.finish(pg.gather(in, list, dst, c.host_options()));
}

std::shared_ptr<Work> staged_scatter(ProcessGroup& pg, const Tensor& output,
                                     const std::vector<Tensor>& scatter_list, int src,
                                     const CollectiveOptions& o) {
  Call c(pg, "scatter", o);
  std::vector<Tensor> list =
      pg.rank() == src ? c.stage(scatter_list, "scatter_list entry", true, false) : scatter_list;
  Tensor out = c.stage(output, "output", false, true);
  return c.finish(pg.scatter(out, list, src, c.host_options()));
}

std::shared_ptr<Work> staged_reduce_scatter(ProcessGroup& pg, const Tensor& output,
                                            const std::vector<Tensor>& inputs, ReduceOp op,
                                            const CollectiveOptions& o) {
  Call c(pg, "reduce_scatter", o);
  auto in = c.stage(inputs, "input_list entry", true, false);
  Tensor out = c.stage(output, "output", false, true);
  return c.finish(pg.reduce_scatter(out, in, op, c.host_options()));
}

std::shared_ptr<Work> staged_reduce_scatter_tensor(ProcessGroup& pg, const Tensor& output,
                                                   const Tensor& input, ReduceOp op,
                                                   const CollectiveOptions& o) {
  Call c(pg, "reduce_scatter_tensor", o);
  Tensor in = c.stage(input, "input", true, false);
  Tensor out = c.stage(output, "output", false, true);
  return c.finish(pg.reduce_scatter_tensor(out, in, op, c.host_options()));
}

std::shared_ptr<Work> staged_all_to_all(ProcessGroup& pg, const std::vector<Tensor>& outputs,
                                        const std::vector<Tensor>& inputs,
                                        const CollectiveOptions& o) {
  Call c(pg, "all_to_all", o);
  auto in = c.stage(inputs, "input_list entry", true, false);
  auto out = c.stage(outputs, "output_list entry", false, true);
  return c.finish(pg.all_to_all(out, in, c.host_options()));
}

std::shared_ptr<Work> staged_all_to_all_single(ProcessGroup& pg, const Tensor& output,
                                               const Tensor& input,
                                               const std::vector<int64_t>& output_splits,
                                               const std::vector<int64_t>& input_splits,
                                               const CollectiveOptions& o) {
  Call c(pg, "all_to_all_single", o);
  Tensor in = c.stage(input, "input", true, false);
  Tensor out = c.stage(output, "output", false, true);
  return c.finish(pg.all_to_all_single(out, in, output_splits, input_splits, c.host_options()));
}

}  // namespace tpcomm::detail
