// Operations: collectives and point-to-point on a ProcessGroup (roots and peers are group
// ranks, as the C++ methods take them), batch_isend_irecv (global peers), object collectives
// (pickled bytes; global ranks), average_parameters. Every call converts its arrays first
// (errors before any communication), then issues the operation without the GIL; a blocking
// call then waits interruptibly (common.h).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>

#include "common.h"

namespace tpcomm::py {
namespace {

using nb::gil_scoped_release;

GroupPtr resolve(const GroupPtr& g) { return g ? g : default_group(); }

CollectiveOptions options(double premul = 1.0) {
  CollectiveOptions o;
  o.async_op = true;  // a blocking call waits interruptibly in finish()
  o.premul_scale = premul;
  return o;
}

template <class F>
nb::object run(const GroupPtr& g, bool async_op, nb::object keep, F&& issue) {
  std::shared_ptr<Work> w;
  {
    gil_scoped_release r;
    w = issue();
  }
  return finish(std::move(w), g, async_op, std::move(keep));
}

Object to_object(nb::handle b) {
  nb::bytes by = nb::cast<nb::bytes>(b);
  const auto* p = static_cast<const uint8_t*>(by.data());
  return Object(p, p + by.size());
}
std::vector<Object> to_objects(nb::handle seq) {
  std::vector<Object> out;
  if (seq.is_none()) return out;
  for (nb::handle h : seq) out.push_back(to_object(h));
  return out;
}
nb::list to_list(const std::vector<Object>& v) {
  nb::list l;
  for (const Object& o : v) l.append(nb::bytes(o.data(), o.size()));
  return l;
}

void bind_collectives(nb::module_& m) {
  auto a = [](const char* n) { return nb::arg(n); };
  m.def(
      "broadcast",
      [](GroupPtr g, nb::handle t, int src, bool async_op) {
        g = resolve(g);
        Tensor x = to_tensor(t, true, "broadcast: tensor");
        return run(g, async_op, nb::borrow(t), [&] { return g->broadcast(x, src, options()); });
      },
      a("group").none(), a("tensor"), a("src"), a("async_op"));
  m.def(
      "all_reduce",
      [](GroupPtr g, nb::handle t, ReduceOp op, double premul, bool async_op) {
        g = resolve(g);
        Tensor x = to_tensor(t, true, "all_reduce: tensor");
        return run(g, async_op, nb::borrow(t),
                   [&] { return g->all_reduce(x, op, options(premul)); });
      },
      a("group").none(), a("tensor"), a("op"), a("premul"), a("async_op"));
  m.def(
      "reduce",
      [](GroupPtr g, nb::handle t, int dst, ReduceOp op, double premul, bool async_op) {
        g = resolve(g);
        Tensor x = to_tensor(t, true, "reduce: tensor");
        return run(g, async_op, nb::borrow(t),
                   [&] { return g->reduce(x, dst, op, options(premul)); });
      },
      a("group").none(), a("tensor"), a("dst"), a("op"), a("premul"), a("async_op"));
}

void bind_gathers(nb::module_& m) {
  auto a = [](const char* n) { return nb::arg(n); };
  m.def(
      "all_gather",
      [](GroupPtr g, nb::handle out, nb::handle in, bool async_op) {
        g = resolve(g);
        auto o = to_tensors(out, true, "all_gather: tensor_list");
        Tensor i = to_tensor(in, false, "all_gather: tensor");
        return run(g, async_op, nb::make_tuple(out, in),
                   [&] { return g->all_gather(o, i, options()); });
      },
      a("group").none(), a("tensor_list"), a("tensor"), a("async_op"));
  m.def(
      "all_gather_into_tensor",
      [](GroupPtr g, nb::handle out, nb::handle in, bool async_op) {
        g = resolve(g);
        Tensor o = to_tensor(out, true, "all_gather_into_tensor: output_tensor");
        Tensor i = to_tensor(in, false, "all_gather_into_tensor: input_tensor");
        return run(g, async_op, nb::make_tuple(out, in),
                   [&] { return g->all_gather_into_tensor(o, i, options()); });
      },
      a("group").none(), a("output_tensor"), a("input_tensor"), a("async_op"));
  m.def(
      "gather",
      [](GroupPtr g, nb::handle in, nb::handle list, int dst, bool async_op) {
        g = resolve(g);
        Tensor i = to_tensor(in, false, "gather: tensor");
        auto l = to_tensors(list, true, "gather: gather_list");
        return run(g, async_op, nb::make_tuple(in, list),
                   [&] { return g->gather(i, l, dst, options()); });
      },
      a("group").none(), a("tensor"), a("gather_list").none(), a("dst"), a("async_op"));
  m.def(
      "scatter",
      [](GroupPtr g, nb::handle out, nb::handle list, int src, bool async_op) {
        g = resolve(g);
        Tensor o = to_tensor(out, true, "scatter: tensor");
        auto l = to_tensors(list, false, "scatter: scatter_list");
        return run(g, async_op, nb::make_tuple(out, list),
                   [&] { return g->scatter(o, l, src, options()); });
      },
      a("group").none(), a("tensor"), a("scatter_list").none(), a("src"), a("async_op"));
}

void bind_exchanges(nb::module_& m) {
  auto a = [](const char* n) { return nb::arg(n); };
  m.def(
      "reduce_scatter",
      [](GroupPtr g, nb::handle out, nb::handle list, ReduceOp op, double premul, bool async_op) {
        g = resolve(g);
        Tensor o = to_tensor(out, true, "reduce_scatter: output");
        auto l = to_tensors(list, false, "reduce_scatter: input_list");
        return run(g, async_op, nb::make_tuple(out, list),
                   [&] { return g->reduce_scatter(o, l, op, options(premul)); });
      },
      a("group").none(), a("output"), a("input_list"), a("op"), a("premul"), a("async_op"));
  m.def(
      "reduce_scatter_tensor",
      [](GroupPtr g, nb::handle out, nb::handle in, ReduceOp op, double premul, bool async_op) {
        g = resolve(g);
        Tensor o = to_tensor(out, true, "reduce_scatter_tensor: output");
        Tensor i = to_tensor(in, false, "reduce_scatter_tensor: input");
        return run(g, async_op, nb::make_tuple(out, in),
                   [&] { return g->reduce_scatter_tensor(o, i, op, options(premul)); });
      },
      a("group").none(), a("output"), a("input"), a("op"), a("premul"), a("async_op"));
  m.def(
      "all_to_all",
      [](GroupPtr g, nb::handle out, nb::handle in, bool async_op) {
        g = resolve(g);
        auto o = to_tensors(out, true, "all_to_all: output_tensor_list");
        auto i = to_tensors(in, false, "all_to_all: input_tensor_list");
        return run(g, async_op, nb::make_tuple(out, in),
                   [&] { return g->all_to_all(o, i, options()); });
      },
      a("group").none(), a("output_tensor_list"), a("input_tensor_list"), a("async_op"));
  m.def(
      "all_to_all_single",
      [](GroupPtr g, nb::handle out, nb::handle in, std::vector<int64_t> out_splits,
         std::vector<int64_t> in_splits, bool async_op) {
        g = resolve(g);
        Tensor o = to_tensor(out, true, "all_to_all_single: output");
        Tensor i = to_tensor(in, false, "all_to_all_single: input");
        return run(g, async_op, nb::make_tuple(out, in),
                   [&] { return g->all_to_all_single(o, i, out_splits, in_splits, options()); });
      },
      a("group").none(), a("output"), a("input"), a("output_split_sizes"), a("input_split_sizes"),
      a("async_op"));
  m.def(
      "barrier",
      [](GroupPtr g, bool async_op) {
        g = resolve(g);
        return run(g, async_op, nb::none(), [&] { return g->barrier(options()); });
      },
      a("group").none(), a("async_op"));
}

void bind_p2p(nb::module_& m) {
  auto a = [](const char* n) { return nb::arg(n); };
  m.def(
      "send",
      [](GroupPtr g, nb::handle t, int dst, int tag, bool async_op) {
        g = resolve(g);
        Tensor x = to_tensor(t, false, "send: tensor");
        return run(g, async_op, nb::borrow(t), [&] { return g->isend(x, dst, tag); });
      },
      a("group").none(), a("tensor"), a("dst"), a("tag"), a("async_op"));
  m.def(
      "recv",
      [](GroupPtr g, nb::handle t, int src, int tag, bool async_op) -> nb::object {
        g = resolve(g);
        Tensor x = to_tensor(t, true, "recv: tensor");
        std::shared_ptr<Work> w;
        {
          gil_scoped_release r;
          w = g->irecv(x, src, tag);
        }
        if (async_op) return finish(std::move(w), g, true, nb::borrow(t));
        wait_interruptible(*w, std::nullopt, t);
        return nb::int_(w->source_rank());
      },
      a("group").none(), a("tensor"), a("src"), a("tag"), a("async_op"));
  m.def(
      "batch_isend_irecv",
      [](nb::list ops) {
        // (is_send, tensor, global peer, group or None, tag) per operation.
        std::vector<P2POp> v;
        std::vector<GroupPtr> groups;
        for (size_t i = 0; i < ops.size(); ++i) {
          nb::tuple op = nb::cast<nb::tuple>(ops[i]);
          bool is_send = nb::cast<bool>(op[0]);
          std::string what = "batch_isend_irecv: op " + std::to_string(i) + " tensor";
          Tensor x = to_tensor(op[1], !is_send, what.c_str());
          GroupPtr g = resolve(op[3].is_none() ? GroupPtr() : nb::cast<GroupPtr>(op[3]));
          groups.push_back(g);
          v.emplace_back(is_send ? P2POp::Kind::Send : P2POp::Kind::Recv, x, nb::cast<int>(op[2]),
                         g, nb::cast<int>(op[4]));
        }
        std::vector<std::shared_ptr<Work>> works;
        {
          gil_scoped_release r;
          works = batch_isend_irecv(v);
        }
        nb::list out;
        for (size_t i = 0; i < works.size(); ++i)
          out.append(finish(works[i], groups[i], true, nb::borrow(ops[i])));
        return out;
      },
      a("ops"));
}

void bind_objects(nb::module_& m) {
  auto a = [](const char* n) { return nb::arg(n); };
  m.def(
      "broadcast_object_list",
      [](nb::handle list, int src, GroupPtr g) {
        auto v = to_objects(list);
        {
          gil_scoped_release r;
          broadcast_object_list(v, src, g);
        }
        return to_list(v);
      },
      a("object_list").none(), a("src"), a("group").none());
  m.def(
      "all_gather_object",
      [](nb::handle obj, GroupPtr g) {
        Object o = to_object(obj);
        std::vector<Object> v;
        {
          gil_scoped_release r;
          all_gather_object(v, o, g);
        }
        return to_list(v);
      },
      a("obj"), a("group").none());
  m.def(
      "all_gather_object_enforce_type",
      [](GroupPtr g, const std::string& type, nb::handle obj) {
        TypedObject t{type, to_object(obj)};
        std::vector<TypedObject> v;
        {
          gil_scoped_release r;
          all_gather_object_enforce_type(g, v, t);
        }
        nb::list l;
        for (const TypedObject& x : v) l.append(nb::bytes(x.bytes.data(), x.bytes.size()));
        return l;
      },
      a("group").none(), a("type"), a("obj"));
}

void bind_more_objects(nb::module_& m) {
  auto a = [](const char* n) { return nb::arg(n); };
  m.def(
      "gather_object",
      [](nb::handle obj, int dst, bool is_dst, GroupPtr g) -> nb::object {
        Object o = to_object(obj);
        std::vector<Object> v;
        {
          gil_scoped_release r;
          gather_object(o, is_dst ? &v : nullptr, dst, g);
        }
        if (!is_dst) return nb::none();
        return to_list(v);
      },
      a("obj"), a("dst"), a("is_dst"), a("group").none());
  m.def(
      "scatter_object_list",
      [](nb::handle in, int src, GroupPtr g) {
        auto iv = to_objects(in);
        std::vector<Object> out(1);
        {
          gil_scoped_release r;
          scatter_object_list(out, iv, src, g);
        }
        return nb::bytes(out.at(0).data(), out.at(0).size());
      },
      a("input_list").none(), a("src"), a("group").none());
  m.def(
      "send_object_list",
      [](nb::handle list, int dst, GroupPtr g) {
        auto v = to_objects(list);
        gil_scoped_release r;
        send_object_list(v, dst, g);
      },
      a("object_list"), a("dst"), a("group").none());
  m.def(
      "recv_object_list",
      [](int src, GroupPtr g) {
        std::vector<Object> v;
        int sender;
        {
          gil_scoped_release r;
          sender = recv_object_list(v, src, g);
        }
        return nb::make_tuple(to_list(v), sender);
      },
      a("src"), a("group").none());
  m.def(
      "average_parameters",
      [](nb::handle params, GroupPtr g) {
        auto v = to_tensors(params, true, "average_parameters: params");
        gil_scoped_release r;
        average_parameters(v, g);
      },
      a("params"), a("group").none());
}

}  // namespace

void bind_ops(nb::module_& m) {
  nb::enum_<ReduceOp>(m, "ReduceOp")
      .value("SUM", ReduceOp::SUM)
      .value("PRODUCT", ReduceOp::PRODUCT)
      .value("MIN", ReduceOp::MIN)
      .value("MAX", ReduceOp::MAX)
      .value("AVG", ReduceOp::AVG)
      .value("BAND", ReduceOp::BAND)
      .value("BOR", ReduceOp::BOR)
      .value("BXOR", ReduceOp::BXOR)
      .value("PREMUL_SUM", ReduceOp::PREMUL_SUM);
  bind_collectives(m);
  bind_gathers(m);
  bind_exchanges(m);
  bind_p2p(m);
  bind_objects(m);
  bind_more_objects(m);
}

}  // namespace tpcomm::py
