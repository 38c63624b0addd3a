/*
 * backend.cpp — torch_loom: Loom as a torch.distributed (c10d) backend.
 *
 * BackendLoom is a c10d::Backend over one Loom communicator. The creator
 * (called by torch.distributed for every process group, with the group's
 * prefixed c10d store) makes rank 0 call loomGetUniqueId and publish the
 * 128-byte id in the store under "torch_loom/uid"; the other ranks read it
 * and every rank calls loomCommInitRankConfig with the group's timeout as
 * Loom's timeoutSec. new_group gets a fresh store prefix, so each group gets
 * its own communicator; dist.split_group, and new_group where the default
 * group has a bound device, split the parent's instead (see split()).
 *
 * Asynchrony: each backend owns one Loom host stream. An operation is
 * issued on the caller's thread onto the stream, followed by a callback
 * (loomStreamAddCallback) that Loom's progress thread calls once it is
 * complete: it copies results back where needed and completes the
 * operation's Work (and its Future), or fails them with Loom's error. A
 * synchronous operation (opts.asyncOp false: torch >= 2.6 says the caller
 * waits at once) with nothing in flight before it runs at once on the
 * caller's thread with the NULL stream (submit): no thread hand-off.
 *
 * Arguments are checked on the caller's thread (a RuntimeError at once).
 * Copies of inputs (non-contiguous tensors, lists flattened into one
 * buffer) are made at issue when nothing is in flight, and otherwise on the
 * stream, just before the operation (stage), so they see what earlier
 * operations wrote. A failed Loom call completes the Work with a
 * DistBackendError (a RuntimeError) carrying loomGetLastError's line, which
 * names a dead or stopped peer; after a failure on the stream, later
 * operations on it fail with the same line (the stream keeps its first
 * error).
 *
 * Batches (batch_isend_irecv, _coalescing_manager): see startCoalescing.
 *
 * CUDA tensors (the backend registers for "cpu" and "cuda") do not go
 * on the host stream: see runOnCuda. Torch's CUDA stream and events are
 * reached through c10's device-neutral interface (c10::Stream's native
 * handle, c10::Event), so the module builds without CUDA headers. That path
 * has been built but never run: the machines it was written on have no GPU.
 */
#include <torch/python.h>

#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <loom.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>

namespace {

using c10d::OpType;

const char *kName = "loom";

/*
 * An operation runs in two parts: a Job issues its Loom call(s) and returns
 * the Finish that runs once they have completed (copies back into
 * non-contiguous or list outputs). Outside a batch the two run back to back;
 * in a batch (coalescing) every Job is issued inside one Loom group and the
 * Finishes run after loomGroupEnd, so the temporaries they hold stay alive
 * until the data has moved.
 */
using Finish = std::function<void()>;
using Job = std::function<Finish(loomStream_t)>;

/*
 * Whether the caller goes on before the operation ends: torch >= 2.6 says
 * so in the options (dist.all_reduce without async_op waits at once); for
 * an older torch, every operation is taken as asynchronous.
 */
template <typename O> auto asyncOf(const O &o, int) -> decltype(bool(o.asyncOp))
{
    return o.asyncOp;
}
template <typename O> bool asyncOf(const O &, long)
{
    return true;
}

/* One Finish that runs each of fins in order. */
Finish all(std::vector<Finish> fins)
{
    return [fins] {
        for (auto &f : fins)
            f();
    };
}

/* The Loom type of a dtype that Loom can reduce; false if there is none. */
bool reduceType(at::ScalarType t, loomDataType_t *out)
{
    switch (t) {
    case at::kChar:
        *out = loomInt8;
        return true;
    case at::kByte:
        *out = loomUint8;
        return true;
    case at::kInt:
        *out = loomInt32;
        return true;
    case at::kLong:
        *out = loomInt64;
        return true;
    case at::kUInt32:
        *out = loomUint32;
        return true;
    case at::kUInt64:
        *out = loomUint64;
        return true;
    case at::kHalf:
        *out = loomFloat16;
        return true;
    case at::kFloat:
        *out = loomFloat32;
        return true;
    case at::kDouble:
        *out = loomFloat64;
        return true;
    case at::kBFloat16:
        *out = loomBfloat16;
        return true;
    default:
        return false;
    }
}

const char *redOpName(c10d::ReduceOp::RedOpType op)
{
    switch (op) {
    case c10d::ReduceOp::SUM:
        return "SUM";
    case c10d::ReduceOp::AVG:
        return "AVG";
    case c10d::ReduceOp::PRODUCT:
        return "PRODUCT";
    case c10d::ReduceOp::MIN:
        return "MIN";
    case c10d::ReduceOp::MAX:
        return "MAX";
    case c10d::ReduceOp::BAND:
        return "BAND";
    case c10d::ReduceOp::BOR:
        return "BOR";
    case c10d::ReduceOp::BXOR:
        return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM:
        return "PREMUL_SUM";
    default:
        return "UNUSED";
    }
}

/* Loom's timeout (whole seconds, at least 1) for a c10d timeout. */
int timeoutSec(std::chrono::milliseconds ms)
{
    long long sec = (ms.count() + 999) / 1000;
    return (int)std::max(1LL, std::min(sec, (long long)INT32_MAX));
}

/* How a tensor goes over the wire: a Loom type and a count of elements. */
struct Wire {
    loomDataType_t type;
    size_t count;
};

/*
 * Data movement: the tensor's own type when Loom has it, else its bytes
 * (bool, int16, complex, ... travel unchanged).
 */
Wire moveWire(const at::Tensor &t)
{
    Wire w;
    if (reduceType(t.scalar_type(), &w.type))
        w.count = (size_t)t.numel();
    else {
        w.type = loomUint8;
        w.count = (size_t)t.numel() * t.element_size();
    }
    return w;
}

/* A contiguous stand-in for a tensor (BackendLoom::dense); copies back into it at the end. */
struct Dense {
    at::Tensor orig, buf;
    Dense(const at::Tensor &t, at::Tensor b) : orig(t), buf(std::move(b))
    {
    }
    void *ptr() const
    {
        return buf.data_ptr();
    }
    void writeBack()
    {
        if (!buf.is_same(orig))
            orig.copy_(buf);
    }
};

class BackendLoom;

class WorkLoom : public c10d::Work {
  public:
    WorkLoom(int rank, OpType type, std::vector<at::Tensor> outputs)
        : Work(rank, type), outputs_(std::move(outputs)),
          future_(c10::make_intrusive<c10::ivalue::Future>(
              c10::ListType::create(c10::TensorType::get())))
    {
    }
    c10::intrusive_ptr<c10::ivalue::Future> getFuture() override
    {
        return future_;
    }
    std::vector<at::Tensor> result() override
    {
        return outputs_;
    }
    /* A batch's Work gathers the outputs of its operations as they are issued. */
    void addOutputs(const std::vector<at::Tensor> &ts)
    {
        outputs_.insert(outputs_.end(), ts.begin(), ts.end());
    }
    void complete(std::exception_ptr e)
    {
        /* The future first: a waiter released by finish() may read it at once. */
        if (e)
            future_->setError(e);
        else
            future_->markCompleted(c10::IValue(outputs_));
        finish(e);
    }

  private:
    std::vector<at::Tensor> outputs_;
    c10::intrusive_ptr<c10::ivalue::Future> future_;
};

/*
 * The Work of an operation on CUDA tensors: the Loom call was issued on the
 * caller's current CUDA stream, so the operation is done when that stream
 * passes the event recorded after it. wait() makes the caller's current
 * stream wait for it (as NCCL's backend does); the future is a CUDA-aware
 * one, completed at once, whose users' streams wait for the same point.
 */
class WorkLoomCuda : public c10d::Work {
  public:
    WorkLoomCuda(int rank, OpType type, std::vector<at::Tensor> outputs, c10::Device device,
                 const c10::Stream &stream, std::function<void()> checkError)
        : Work(rank, type), outputs_(std::move(outputs)), device_(device),
          event_(c10::DeviceType::CUDA), checkError_(std::move(checkError)),
          future_(c10::make_intrusive<c10::ivalue::Future>(
              c10::ListType::create(c10::TensorType::get()), std::vector<c10::Device>{device}))
    {
        event_.record(stream);
        future_->markCompleted(c10::IValue(outputs_));
    }
    bool isCompleted() override
    {
        return event_.query();
    }
    bool wait(std::chrono::milliseconds) override
    {
        c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
        event_.block(impl.getStream(device_));
        checkError_();
        return true;
    }
    void synchronize() override
    {
        event_.synchronize();
        checkError_();
    }
    c10::intrusive_ptr<c10::ivalue::Future> getFuture() override
    {
        return future_;
    }
    std::vector<at::Tensor> result() override
    {
        return outputs_;
    }

  private:
    std::vector<at::Tensor> outputs_;
    c10::Device device_;
    c10::Event event_;
    std::function<void()> checkError_;
    c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class BackendLoom : public c10d::Backend {
  public:
    BackendLoom(loomComm_t comm, int rank, int size, std::chrono::milliseconds timeout)
        : Backend(rank, size), comm_(comm), timeout_(timeout)
    {
        check(loomStreamCreate(&stream_), "loomStreamCreate");
    }
    ~BackendLoom() override
    {
        shutdown();
    }

    const std::string getBackendName() const override
    {
        return kName;
    }
    c10::intrusive_ptr<Options> getBackendOptions() override
    {
        return c10::make_intrusive<Options>(kName, timeout_);
    }

    /* Waits for the operations in flight, then frees the communicator. */
    void shutdown() override
    {
        stopStream();
        destroyCudaStreams();
        std::lock_guard<std::mutex> g(m_);
        if (comm_) {
            loomCommDestroy(comm_);
            comm_ = nullptr;
        }
    }
    /* Stops what is in flight (it fails within Loom's 100 ms) and frees the communicator. */
    void abort() override
    {
        loomComm_t c;
        {
            std::lock_guard<std::mutex> g(m_);
            aborted_ = true;
            c = comm_;
        }
        /* not under m_: it waits for the stream's operations, whose callbacks take m_ */
        if (c)
            loomCommAbort(c);
        stopStream();
        std::lock_guard<std::mutex> g(m_);
        comm_ = nullptr;
    }

    c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor> &tensors,
                                             const c10d::BroadcastOptions &opts) override
    {
        const at::Tensor &t = one(tensors, "broadcast");
        checkRoot(opts.rootRank, "broadcast");
        TORCH_CHECK(opts.rootTensor == 0, "torch_loom: broadcast: rootTensor must be 0");
        int root = (int)opts.rootRank;
        return enqueue(OpType::BROADCAST, asyncOf(opts, 0), {t}, [this, t, root](loomStream_t s) {
            auto d = dense(t);
            Wire w = moveWire(d->buf);
            check(loomBroadcast(d->ptr(), d->ptr(), w.count, w.type, root, comm_, s), "broadcast");
            return Finish([d] { d->writeBack(); });
        });
    }

    c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor> &tensors,
                                             const c10d::AllreduceOptions &opts) override
    {
        const at::Tensor &t = one(tensors, "allreduce");
        loomDataType_t type = reduceTypeOf(t, "allreduce");
        loomRedOp_t op = redOp(opts.reduceOp, "allreduce");
        return enqueue(
            OpType::ALLREDUCE, asyncOf(opts, 0), {t}, [this, t, type, op](loomStream_t s) {
                auto d = dense(t);
                check(loomAllReduce(d->ptr(), d->ptr(), (size_t)t.numel(), type, op, comm_, s),
                      "allreduce");
                return Finish([d] { d->writeBack(); });
            });
    }

    /* Flattened into one buffer: one AllReduce for all of them. */
    c10::intrusive_ptr<c10d::Work>
    allreduce_coalesced(std::vector<at::Tensor> &tensors,
                        const c10d::AllreduceCoalescedOptions &opts) override
    {
        TORCH_CHECK(!tensors.empty(), "torch_loom: allreduce_coalesced: no tensors");
        loomDataType_t type = loomFloat32;
        for (auto &t : tensors) {
            checkTensor(t, "allreduce_coalesced");
            type = reduceTypeOf(t, "allreduce_coalesced");
            TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type(),
                        "torch_loom: allreduce_coalesced: tensors of different dtypes (",
                        tensors[0].scalar_type(), " and ", t.scalar_type(), ")");
        }
        loomRedOp_t op = redOp(opts.reduceOp, "allreduce_coalesced");
        std::vector<at::Tensor> ts = tensors;
        return enqueue(OpType::ALLREDUCE_COALESCED, asyncOf(opts, 0), ts,
                       [this, ts, type, op](loomStream_t s) {
                           at::Tensor buf = catFlat(ts);
                           check(loomAllReduce(buf.data_ptr(), buf.data_ptr(), (size_t)buf.numel(),
                                               type, op, comm_, s),
                                 "allreduce_coalesced");
                           return Finish([ts, buf] {
                               int64_t off = 0;
                               for (auto &t : ts) {
                                   t.copy_(buf.narrow(0, off, t.numel()).view(t.sizes()));
                                   off += t.numel();
                               }
                           });
                       });
    }

    c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor> &tensors,
                                          const c10d::ReduceOptions &opts) override
    {
        const at::Tensor &t = one(tensors, "reduce");
        checkRoot(opts.rootRank, "reduce");
        TORCH_CHECK(opts.rootTensor == 0, "torch_loom: reduce: rootTensor must be 0");
        loomDataType_t type = reduceTypeOf(t, "reduce");
        loomRedOp_t op = redOp(opts.reduceOp, "reduce");
        int root = (int)opts.rootRank;
        return enqueue(
            OpType::REDUCE, asyncOf(opts, 0), {t}, [this, t, type, op, root](loomStream_t s) {
                auto d = dense(t);
                check(loomReduce(d->ptr(), d->ptr(), (size_t)t.numel(), type, op, root, comm_, s),
                      "reduce");
                return Finish([this, d, root] {
                    if (root == rank_)
                        d->writeBack();
                });
            });
    }

    c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>> &outputs,
                                             std::vector<at::Tensor> &inputs,
                                             const c10d::AllgatherOptions &opts) override
    {
        const at::Tensor &in = one(inputs, "allgather");
        TORCH_CHECK(outputs.size() == 1, "torch_loom: allgather: one output list per process");
        std::vector<at::Tensor> outs = outputs[0];
        sameShapes(outs, in, "allgather");
        return enqueue(OpType::ALLGATHER, asyncOf(opts, 0), outs, [this, in, outs](loomStream_t s) {
            at::Tensor src = contig(in);
            at::Tensor all = at::empty({(int64_t)size_, in.numel()}, in.options());
            Wire w = moveWire(src);
            check(loomAllGather(src.data_ptr(), all.data_ptr(), w.count, w.type, comm_, s),
                  "allgather");
            return Finish([this, outs, src, all] {
                for (int r = 0; r < size_; r++)
                    outs[r].copy_(all[r].view(outs[r].sizes()));
            });
        });
    }

    /*
     * Every input (any dtypes) as bytes in one buffer: one AllGather of it,
     * then each rank's part of each input into its output.
     */
    c10::intrusive_ptr<c10d::Work>
    allgather_coalesced(std::vector<std::vector<at::Tensor>> &outputs,
                        std::vector<at::Tensor> &inputs,
                        const c10d::AllgatherOptions &opts) override
    {
        const char *op = "allgather_coalesced";
        TORCH_CHECK(!inputs.empty() && outputs.size() == (size_t)size_, "torch_loom: ", op,
                    ": one output list per rank (", size_, "), got ", outputs.size());
        std::vector<at::Tensor> outs;
        for (size_t k = 0; k < inputs.size(); k++) {
            checkTensor(inputs[k], op);
            TORCH_CHECK(inputs[k].device() == inputs[0].device(), "torch_loom: ", op,
                        ": inputs on different devices");
        }
        for (auto &list : outputs) {
            TORCH_CHECK(list.size() == inputs.size(), "torch_loom: ", op,
                        ": each rank's output list needs one tensor per input (", inputs.size(),
                        "), got ", list.size());
            for (size_t k = 0; k < inputs.size(); k++) {
                checkTensor(list[k], op);
                TORCH_CHECK(list[k].numel() == inputs[k].numel() &&
                                list[k].scalar_type() == inputs[k].scalar_type(),
                            "torch_loom: ", op, ": output ", k,
                            " differs from its input in size or dtype");
            }
            outs.insert(outs.end(), list.begin(), list.end());
        }
        std::vector<at::Tensor> ins = inputs;
        auto lists = outputs;
        return enqueue(
            OpType::ALLGATHER_COALESCED, asyncOf(opts, 0), outs,
            [this, ins, lists](loomStream_t s) {
                int64_t nbytes = 0;
                for (auto &t : ins)
                    nbytes += t.numel() * t.element_size();
                at::Tensor src = stage({nbytes}, ins[0].options().dtype(at::kByte), [ins] {
                    std::vector<at::Tensor> bytes;
                    for (auto &t : ins)
                        bytes.push_back(asBytes(t));
                    return at::cat(bytes);
                });
                at::Tensor all = at::empty({(int64_t)size_, src.numel()}, src.options());
                check(loomAllGather(src.data_ptr(), all.data_ptr(), (size_t)src.numel(), loomUint8,
                                    comm_, s),
                      "allgather_coalesced");
                return Finish([this, ins, lists, src, all] {
                    int64_t off = 0;
                    for (size_t k = 0; k < ins.size(); k++) {
                        int64_t n = ins[k].numel() * ins[k].element_size();
                        for (int r = 0; r < size_; r++)
                            lists[r][k].copy_(fromBytes(all[r].narrow(0, off, n), lists[r][k]));
                        off += n;
                    }
                });
            });
    }

    /*
     * gather and scatter: Loom has no Gather or Scatter, so each is one
     * AlltoAllv in which only the root receives (gather) or sends (scatter).
     */
    c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>> &outputs,
                                          std::vector<at::Tensor> &inputs,
                                          const c10d::GatherOptions &opts) override
    {
        const at::Tensor &in = one(inputs, "gather");
        int root = (int)opts.rootRank;
        std::vector<at::Tensor> outs = rootList(outputs, in, root, "gather");
        return enqueue(
            OpType::GATHER, asyncOf(opts, 0), outs, [this, in, outs, root](loomStream_t s) {
                size_t n = (size_t)in.numel();
                at::Tensor dst = at::empty({outs.empty() ? 1 : (int64_t)(n * size_)}, in.options());
                std::vector<size_t> sc(size_, 0), rc(size_, 0), sd(size_, 0), rd(size_);
                sc[root] = n;
                for (int r = 0; r < size_; r++) {
                    rd[r] = n * r;
                    if (!outs.empty())
                        rc[r] = n;
                }
                Finish fin = exchange(dst, in, sc, sd, rc, rd, "gather", s);
                return Finish([this, outs, dst, n, fin] {
                    fin();
                    for (size_t r = 0; r < outs.size(); r++)
                        outs[r].copy_(
                            dst.narrow(0, (int64_t)(n * r), (int64_t)n).view(outs[r].sizes()));
                });
            });
    }

    c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor> &outputs,
                                           std::vector<std::vector<at::Tensor>> &inputs,
                                           const c10d::ScatterOptions &opts) override
    {
        const at::Tensor &out = one(outputs, "scatter");
        int root = (int)opts.rootRank;
        std::vector<at::Tensor> ins = rootList(inputs, out, root, "scatter");
        return enqueue(
            OpType::SCATTER, asyncOf(opts, 0), {out}, [this, out, ins, root](loomStream_t s) {
                size_t n = (size_t)out.numel();
                at::Tensor src = ins.empty() ? at::empty({1}, out.options()) : catFlat(ins);
                std::vector<size_t> sc(size_, 0), sd(size_), rc(size_, 0), rd(size_, 0);
                rc[root] = n;
                for (int r = 0; r < size_; r++) {
                    sd[r] = n * r;
                    if (!ins.empty())
                        sc[r] = n;
                }
                return exchange(out, src, sc, sd, rc, rd, "scatter", s);
            });
    }

    /*
     * Gloo's monitored barrier, over Loom's send and receive on the caller's
     * thread: every rank reports to rank 0, which answers each once all have
     * (or, with wait_all_ranks, names every rank it did not hear from). A
     * rank that does not report fails rank 0's receive after the group's
     * timeout (Loom's, fixed when the communicator was made), not the
     * call's.
     */
    void monitoredBarrier(const c10d::BarrierOptions &, bool waitAllRanks) override
    {
        waitIdle();
        uint8_t b = 0;
        if (rank_ != 0) {
            check(loomSend(&b, 1, loomUint8, 0, comm_, nullptr), "monitored_barrier (send to 0)");
            check(loomRecv(&b, 1, loomUint8, 0, comm_, nullptr), "monitored_barrier (answer of 0)");
            return;
        }
        std::string missing, why;
        int nmissing = 0;
        for (int r = 1; r < size_; r++) {
            if (loomRecv(&b, 1, loomUint8, r, comm_, nullptr) == loomSuccess)
                continue;
            missing += (nmissing++ ? ", " : "") + std::to_string(r);
            if (why.empty())
                why = loomGetLastError(comm_);
            if (!waitAllRanks)
                break;
        }
        /* gloo's words, which callers match */
        if (nmissing)
            C10_THROW_ERROR(DistBackendError,
                            c10::str("torch_loom: ", nmissing > 1 ? "Ranks " : "Rank ", missing,
                                     " failed to pass monitoredBarrier (within the group's "
                                     "timeout): ",
                                     why));
        for (int r = 1; r < size_; r++)
            check(loomSend(&b, 1, loomUint8, r, comm_, nullptr), "monitored_barrier (answer)");
    }

    c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor &out, at::Tensor &in,
                                                   const c10d::AllgatherOptions &opts) override
    {
        checkTensor(in, "_allgather_base");
        checkTensor(out, "_allgather_base");
        checkFlat(out, in, size_, "_allgather_base (all_gather_into_tensor)");
        at::Tensor o = out, i = in;
        return enqueue(OpType::_ALLGATHER_BASE, asyncOf(opts, 0), {o},
                       [this, o, i](loomStream_t s) { return gatherInto(o, i, s); });
    }

    c10::intrusive_ptr<c10d::Work>
    allgather_into_tensor_coalesced(std::vector<at::Tensor> &outs, std::vector<at::Tensor> &ins,
                                    const c10d::AllgatherOptions &opts) override
    {
        TORCH_CHECK(outs.size() == ins.size(),
                    "torch_loom: allgather_into_tensor_coalesced: as many outputs as inputs");
        for (size_t k = 0; k < ins.size(); k++) {
            checkTensor(ins[k], "allgather_into_tensor_coalesced");
            checkTensor(outs[k], "allgather_into_tensor_coalesced");
            checkFlat(outs[k], ins[k], size_, "allgather_into_tensor_coalesced");
        }
        std::vector<at::Tensor> o = outs, i = ins;
        return enqueue(OpType::ALLGATHER_INTO_TENSOR_COALESCED, asyncOf(opts, 0), o,
                       [this, o, i](loomStream_t s) {
                           std::vector<Finish> fins;
                           try {
                               for (size_t k = 0; k < i.size(); k++)
                                   fins.push_back(gatherInto(o[k], i[k], s));
                           } catch (...) {
                               settle(s); /* the calls issued use fins' buffers */
                               throw;
                           }
                           return all(std::move(fins));
                       });
    }

    c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor> &outputs,
                                                  std::vector<std::vector<at::Tensor>> &inputs,
                                                  const c10d::ReduceScatterOptions &opts) override
    {
        const at::Tensor &out = one(outputs, "reduce_scatter");
        TORCH_CHECK(inputs.size() == 1, "torch_loom: reduce_scatter: one input list per process");
        std::vector<at::Tensor> ins = inputs[0];
        sameShapes(ins, out, "reduce_scatter");
        loomDataType_t type = reduceTypeOf(out, "reduce_scatter");
        loomRedOp_t op = redOp(opts.reduceOp, "reduce_scatter");
        return enqueue(OpType::REDUCE_SCATTER, asyncOf(opts, 0), {out},
                       [this, out, ins, type, op](loomStream_t s) {
                           at::Tensor all = catFlat(ins);
                           auto d = dense(out);
                           check(loomReduceScatter(all.data_ptr(), d->ptr(), (size_t)out.numel(),
                                                   type, op, comm_, s),
                                 "reduce_scatter");
                           return Finish([d, all] { d->writeBack(); });
                       });
    }

    c10::intrusive_ptr<c10d::Work>
    _reduce_scatter_base(at::Tensor &out, at::Tensor &in,
                         const c10d::ReduceScatterOptions &opts) override
    {
        checkTensor(in, "_reduce_scatter_base");
        checkTensor(out, "_reduce_scatter_base");
        checkFlat(in, out, size_, "_reduce_scatter_base (reduce_scatter_tensor)");
        loomDataType_t type = reduceTypeOf(out, "_reduce_scatter_base");
        loomRedOp_t op = redOp(opts.reduceOp, "_reduce_scatter_base");
        at::Tensor o = out, i = in;
        return enqueue(
            OpType::_REDUCE_SCATTER_BASE, asyncOf(opts, 0), {o},
            [this, o, i, type, op](loomStream_t s) { return scatterFrom(o, i, type, op, s); });
    }

    c10::intrusive_ptr<c10d::Work>
    reduce_scatter_tensor_coalesced(std::vector<at::Tensor> &outs, std::vector<at::Tensor> &ins,
                                    const c10d::ReduceScatterOptions &opts) override
    {
        TORCH_CHECK(outs.size() == ins.size() && !ins.empty(),
                    "torch_loom: reduce_scatter_tensor_coalesced: as many outputs as inputs");
        std::vector<loomDataType_t> types;
        for (size_t k = 0; k < ins.size(); k++) {
            checkTensor(ins[k], "reduce_scatter_tensor_coalesced");
            checkTensor(outs[k], "reduce_scatter_tensor_coalesced");
            checkFlat(ins[k], outs[k], size_, "reduce_scatter_tensor_coalesced");
            types.push_back(reduceTypeOf(outs[k], "reduce_scatter_tensor_coalesced"));
        }
        loomRedOp_t op = redOp(opts.reduceOp, "reduce_scatter_tensor_coalesced");
        std::vector<at::Tensor> o = outs, i = ins;
        return enqueue(OpType::REDUCE_SCATTER_TENSOR_COALESCED, asyncOf(opts, 0), o,
                       [this, o, i, types, op](loomStream_t s) {
                           std::vector<Finish> fins;
                           try {
                               for (size_t k = 0; k < i.size(); k++)
                                   fins.push_back(scatterFrom(o[k], i[k], types[k], op, s));
                           } catch (...) {
                               settle(s); /* the calls issued use fins' buffers */
                               throw;
                           }
                           return all(std::move(fins));
                       });
    }

    c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor &out, at::Tensor &in,
                                                 std::vector<int64_t> &outSplits,
                                                 std::vector<int64_t> &inSplits,
                                                 const c10d::AllToAllOptions &opts) override
    {
        checkTensor(in, "alltoall_base");
        checkTensor(out, "alltoall_base");
        TORCH_CHECK(in.scalar_type() == out.scalar_type(),
                    "torch_loom: alltoall_base: input and output dtypes differ (", in.scalar_type(),
                    " and ", out.scalar_type(), ")");
        TORCH_CHECK(in.device() == out.device(),
                    "torch_loom: alltoall_base: input and output on different devices");
        std::vector<size_t> sc, sd, rc, rd;
        splitCounts(in, inSplits, "input", &sc, &sd);
        splitCounts(out, outSplits, "output", &rc, &rd);
        at::Tensor o = out, i = in;
        return enqueue(OpType::ALLTOALL_BASE, asyncOf(opts, 0), {o},
                       [this, o, i, sc, sd, rc, rd](loomStream_t s) {
                           return exchange(o, i, sc, sd, rc, rd, "alltoall_base", s);
                       });
    }

    c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor> &outs,
                                            std::vector<at::Tensor> &ins,
                                            const c10d::AllToAllOptions &opts) override
    {
        TORCH_CHECK(outs.size() == (size_t)size_ && ins.size() == (size_t)size_,
                    "torch_loom: alltoall: input and output lists need one tensor per rank (",
                    size_, ")");
        std::vector<size_t> sc, sd, rc, rd;
        size_t so = 0, ro = 0;
        for (int r = 0; r < size_; r++) {
            checkTensor(ins[r], "alltoall");
            checkTensor(outs[r], "alltoall");
            TORCH_CHECK(ins[r].scalar_type() == ins[0].scalar_type() &&
                            outs[r].scalar_type() == ins[0].scalar_type() &&
                            ins[r].device() == ins[0].device() &&
                            outs[r].device() == ins[0].device(),
                        "torch_loom: alltoall: all tensors must have one dtype and device");
            sc.push_back((size_t)ins[r].numel());
            sd.push_back(so);
            so += (size_t)ins[r].numel();
            rc.push_back((size_t)outs[r].numel());
            rd.push_back(ro);
            ro += (size_t)outs[r].numel();
        }
        std::vector<at::Tensor> o = outs, i = ins;
        return enqueue(
            OpType::ALLTOALL, asyncOf(opts, 0), o, [this, o, i, sc, sd, rc, rd](loomStream_t s) {
                at::Tensor src = catFlat(i);
                at::Tensor dst =
                    at::empty({(int64_t)rd.back() + (int64_t)rc.back()}, src.options());
                Finish fin = exchange(dst, src, sc, sd, rc, rd, "alltoall", s);
                return Finish([this, o, dst, rc, rd, fin] {
                    fin();
                    for (int r = 0; r < size_; r++)
                        o[r].copy_(
                            dst.narrow(0, (int64_t)rd[r], (int64_t)rc[r]).view(o[r].sizes()));
                });
            });
    }

    c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor> &tensors, int dst, int) override
    {
        const at::Tensor &t = one(tensors, "send");
        checkPeer(dst, "send");
        return enqueue(OpType::SEND, true, {t}, [this, t, dst](loomStream_t s) {
            at::Tensor c = contig(t);
            Wire w = moveWire(c);
            check(loomSend(c.data_ptr(), w.count, w.type, dst, comm_, s), "send");
            return Finish([c] {});
        });
    }

    c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor> &tensors, int src, int) override
    {
        const at::Tensor &t = one(tensors, "recv");
        checkPeer(src, "recv");
        return enqueue(OpType::RECV, true, {t}, [this, t, src](loomStream_t s) {
            auto d = dense(t);
            Wire w = moveWire(d->buf);
            check(loomRecv(d->ptr(), w.count, w.type, src, comm_, s), "recv");
            return Finish([d] { d->writeBack(); });
        });
    }

    c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor> &, int) override
    {
        TORCH_CHECK(false, "torch_loom: recv from any source: Loom's receive names its peer "
                           "(pass src=)");
    }

    /*
     * batch_isend_irecv and _coalescing_manager: the operations issued until
     * endCoalescing run as one Loom group on the stream, so sends and
     * receives in any order complete (both sides may send first), and the
     * batch has one Work.
     */
    bool supportsCoalescing() const override
    {
        return true;
    }
    void startCoalescing() override
    {
        std::lock_guard<std::mutex> g(m_);
        TORCH_CHECK(!batch_, "torch_loom: startCoalescing: a batch is already open");
        batch_ = std::make_unique<Batch>();
        batch_->device = c10::Device(c10::DeviceType::CPU);
        batch_->work =
            c10::make_intrusive<WorkLoom>(rank_, OpType::COALESCED, std::vector<at::Tensor>{});
    }
    c10::intrusive_ptr<c10d::Work> endCoalescing() override
    {
        std::unique_ptr<Batch> b;
        {
            std::lock_guard<std::mutex> g(m_);
            TORCH_CHECK(batch_, "torch_loom: endCoalescing without startCoalescing");
            b = std::move(batch_);
        }
        if (b->device.is_cuda())
            return runOnCuda(OpType::COALESCED, b->work->result(), b->jobs, true, b->device);
        submit(b->work, std::move(b->jobs), true);
        return b->work;
    }

    /*
     * dist.shrink_group: a new backend over a new communicator of the ranks
     * kept (loomCommShrink, collective over them). SHRINK_ABORT (after a
     * failure) stops the operation in flight on the stream, which then fails;
     * SHRINK_DEFAULT first waits for the operations in flight.
     */
    bool supportsShrinking() const override
    {
        return true;
    }
    c10::intrusive_ptr<c10d::Backend> shrink(const std::vector<int64_t> &exclude, int flags,
                                             const c10::intrusive_ptr<Options> &) override
    {
        TORCH_CHECK(flags == LOOM_SHRINK_DEFAULT || flags == LOOM_SHRINK_ABORT,
                    "torch_loom: shrink: flags ", flags,
                    " are neither SHRINK_DEFAULT nor SHRINK_ABORT");
        if (flags == LOOM_SHRINK_DEFAULT)
            waitIdle();
        std::vector<int> ex(exclude.begin(), exclude.end());
        loomConfig_t config = LOOM_CONFIG_INITIALIZER;
        config.timeoutSec = timeoutSec(timeout_);
        config.netCompress = netCompress();
        loomComm_t nc = nullptr;
        {
            std::lock_guard<std::mutex> g(m_);
            TORCH_CHECK(comm_, "torch_loom: shrink: the process group was shut down");
        }
        check(loomCommShrink(comm_, ex.data(), (int)ex.size(), &nc, &config, flags), "shrink");
        return over(nc, timeout_, "shrink", netCompress_);
    }
    /*
     * dist.split_group, and new_group when the default group has a bound
     * device (see __init__.py): a new backend over loomCommSplit of this
     * one's communicator, collective over all its ranks. torch passes every
     * rank the sorted ranks of its own new group, and a rank in none of them
     * the first group's; its color is the lowest rank of its group (groups
     * do not overlap), its key its rank here, so the new ranks follow torch's
     * sorted order. A rank outside every group takes no communicator and
     * gets nullptr, which torch expects. The queued operations run first, as
     * every rank's split meets the communicator at the same point of its
     * sequence.
     *
     * torch calls split once per device type the group has ("cpu" and
     * "cuda", one backend), but, on torch 2.15, the second time only where the
     * first returned nullptr: a member reuses its new backend. So one torch
     * split (one group_name) makes one loomCommSplit here, and a second call
     * with the same name gets the first's answer.
     */
    bool supportsSplitting() const override
    {
        return true;
    }
    c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store> &,
                                            const std::vector<int> &ranks,
                                            const c10::intrusive_ptr<Options> &opts) override
    {
        std::string name = opts ? opts->group_name : std::string();
        if (!name.empty() && name == lastSplit_.name)
            return lastSplit_.made.lock();
        bool member = std::find(ranks.begin(), ranks.end(), rank_) != ranks.end();
        int color = member ? *std::min_element(ranks.begin(), ranks.end()) : LOOM_SPLIT_NOCOLOR;
        auto b = splitBy(color, rank_, opts ? opts->timeout : timeout_);
        lastSplit_.name = name;
        lastSplit_.made = b;
        return b;
    }
    /* loomCommSplit(color, key) of this backend's communicator; nullptr for no color. */
    c10::intrusive_ptr<c10d::Backend> splitBy(int color, int key, std::chrono::milliseconds timeout)
    {
        waitIdle();
        {
            std::lock_guard<std::mutex> g(m_);
            TORCH_CHECK(comm_, "torch_loom: split: the process group was shut down");
        }
        loomConfig_t config = LOOM_CONFIG_INITIALIZER;
        config.timeoutSec = timeoutSec(timeout);
        config.netCompress = netCompress();
        loomComm_t nc = nullptr;
        check(loomCommSplit(comm_, color, key, &nc, &config), "split (loomCommSplit)");
        return nc ? over(nc, timeout, "split", netCompress_) : nullptr;
    }
    /* A new backend over nc, a communicator made from this one's by origin (with its option). */
    static c10::intrusive_ptr<c10d::Backend> over(loomComm_t nc, std::chrono::milliseconds timeout,
                                                  const char *origin, const std::string &compress)
    {
        int rank = 0, size = 0;
        loomCommUserRank(nc, &rank);
        loomCommCount(nc, &size);
        auto b = c10::make_intrusive<BackendLoom>(nc, rank, size, timeout);
        b->origin_ = origin;
        b->netCompress_ = compress;
        return b;
    }
    /*
     * The net_compress option the group was made with ("" for none: then
     * LOOM_NET_COMPRESS decides), passed on to its splits and shrinks.
     */
    std::string netCompress_;
    const char *netCompress() const
    {
        return netCompress_.empty() ? nullptr : netCompress_.c_str();
    }
    std::chrono::milliseconds timeout() const
    {
        return timeout_;
    }
    /* How this backend's communicator was made: "unique id", "split" or "shrink". */
    const char *origin() const
    {
        return origin_;
    }

    /*
     * For bench/torch-vs-gloo: a SUM AllReduce in place of a contiguous CPU
     * tensor, on the caller's thread, with no stream, Work or future, so the
     * backend's own cost shows as the difference from dist.all_reduce.
     */
    void allreduceDirect(const at::Tensor &t)
    {
        TORCH_CHECK(t.device().is_cpu() && t.is_contiguous(),
                    "torch_loom: _allreduce_direct: a contiguous CPU tensor only");
        loomDataType_t type = reduceTypeOf(t, "_allreduce_direct");
        waitIdle();
        check(loomAllReduce(t.data_ptr(), t.data_ptr(), (size_t)t.numel(), type, loomSum, comm_,
                            nullptr),
              "allreduce");
    }

    /* The ranks of this group that Loom knows to have failed (loomCommGetFailedRanks). */
    std::vector<int> failedRanks()
    {
        std::lock_guard<std::mutex> g(m_);
        TORCH_CHECK(comm_, "torch_loom: failed_ranks: the process group was shut down");
        int n = 0;
        check(loomCommGetFailedRanks(comm_, nullptr, &n), "failed_ranks");
        std::vector<int> r((size_t)n);
        check(loomCommGetFailedRanks(comm_, r.data(), &n), "failed_ranks");
        r.resize((size_t)n);
        return r;
    }

    /* Operations issued on this group so far (every rank issues the same ones). */
    uint64_t getSequenceNumberForGroup() override
    {
        return seq_;
    }

    c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions &opts) override
    {
        return enqueue(OpType::BARRIER, asyncOf(opts, 0), {}, [this](loomStream_t s) {
            auto one = std::make_shared<uint8_t>(0);
            check(loomAllReduce(one.get(), one.get(), 1, loomUint8, loomMax, comm_, s), "barrier");
            return Finish([one] {});
        });
    }

  private:
    loomComm_t comm_;
    std::chrono::milliseconds timeout_;
    loomStream_t stream_ = nullptr; /* the host stream every asynchronous operation goes on */
    std::mutex issueM_;             /* held while an operation is issued: one order for all */
    std::mutex m_;
    struct Batch {
        c10::intrusive_ptr<WorkLoom> work;
        std::vector<Job> jobs;
        c10::Device device = c10::Device(c10::DeviceType::CPU); /* of its operations */
    };
    /* Loom streams wrapping the CUDA streams operations were issued on, by native handle. */
    std::mutex streamsM_;
    std::map<void *, loomStream_t> cudaStreams_;
    size_t busy_ = 0; /* operations issued and not yet completed (under m_) */
    std::condition_variable idle_;
    std::unique_ptr<Batch> batch_; /* open between startCoalescing and endCoalescing */
    bool stop_ = false;
    std::atomic<bool> aborted_{false};
    std::atomic<uint64_t> seq_{0};     /* see getSequenceNumberForGroup */
    const char *origin_ = "unique id"; /* see origin() */
    struct {
        std::string name; /* group_name of the last split() */
        c10::weak_intrusive_ptr<c10d::Backend> made{
            c10::intrusive_ptr<c10d::Backend>()}; /* what it returned (nullptr: none) */
    } lastSplit_;

    /*
     * An operation issued on stream_, until the callback queued after it
     * (done) runs: its Work, and what must outlive its Loom calls.
     */
    struct Pending {
        BackendLoom *backend;
        c10::intrusive_ptr<WorkLoom> work;
        std::vector<Finish> fins;
        const char *what = "operation"; /* its name in an error */
        std::exception_ptr error;       /* met while it was issued or its inputs copied */
    };
    /*
     * While an operation is issued behind others still in flight (under
     * issueM_): the stream its input copies are queued on (see stage), and
     * the operation; nullptr otherwise.
     */
    loomStream_t deferTo_ = nullptr;
    Pending *issuing_ = nullptr;
    /* What the last check() that passed on this thread named: the operation just issued. */
    static thread_local const char *issued_;

    /* The error a failed Loom call (r, with Loom's line) of what becomes. */
    static std::exception_ptr failure(loomResult_t r, const char *what, const char *line)
    {
        try {
            /* " Timed out " as gloo says it: callers (PyTorch's tests among them) match it */
            C10_THROW_ERROR(DistBackendError, c10::str("torch_loom: ", what, " failed",
                                                       r == loomTimeout ? ": Timed out" : "", " (",
                                                       loomGetErrorString(r), "): ", line));
        } catch (...) {
            return std::current_exception();
        }
    }
    static std::exception_ptr abortedError()
    {
        try {
            TORCH_CHECK(false, "torch_loom: the process group was aborted");
        } catch (...) {
            return std::current_exception();
        }
    }

    void check(loomResult_t r, const char *what)
    {
        if (r == loomSuccess) {
            issued_ = what;
            return;
        }
        std::rethrow_exception(failure(r, what, loomGetLastError(comm_)));
    }

    /*
     * Issues one operation, or adds it to the open batch. An operation of a
     * batch returns the batch's Work (the one endCoalescing returns): it
     * completes when the whole batch has.
     */
    c10::intrusive_ptr<c10d::Work> enqueue(OpType type, bool async, std::vector<at::Tensor> outputs,
                                           Job fn)
    {
        c10::Device dev = outputs.empty() ? c10::Device(c10::DeviceType::CPU) : outputs[0].device();
        seq_++;
        {
            std::lock_guard<std::mutex> g(m_);
            if (batch_) {
                TORCH_CHECK(batch_->work->result().empty() || batch_->device == dev,
                            "torch_loom: a batch mixes tensors of ", batch_->device, " and ", dev);
                batch_->device = dev;
                batch_->work->addOutputs(outputs);
                batch_->jobs.push_back(std::move(fn));
                return batch_->work;
            }
        }
        if (dev.is_cuda())
            return runOnCuda(type, std::move(outputs), {std::move(fn)}, false, dev);
        auto work = c10::make_intrusive<WorkLoom>(rank_, type, std::move(outputs));
        std::vector<Job> jobs;
        jobs.push_back(std::move(fn));
        submit(work, std::move(jobs), false, async);
        return work;
    }
    /*
     * Issues an operation (its jobs, grouped or not). A synchronous one (the
     * caller waits at once) with nothing in flight before it runs here and
     * now, on the caller's thread, with Loom's NULL stream: no thread is woken
     * for it. Any other is queued on stream_ with a callback after it that
     * completes its Work; the caller goes on.
     */
    void submit(const c10::intrusive_ptr<WorkLoom> &work, std::vector<Job> jobs, bool grouped,
                bool async = true)
    {
        std::lock_guard<std::mutex> issue(issueM_);
        bool now;
        {
            std::lock_guard<std::mutex> g(m_);
            TORCH_CHECK(!stop_ && comm_, "torch_loom: the process group was shut down");
            now = !async && busy_ == 0;
            busy_++;
        }
        if (now)
            runNow(work, jobs, grouped);
        else
            issueOnStream(work, jobs, grouped);
    }

    /* The synchronous fast path: the operation runs to its end on this thread. */
    void runNow(const c10::intrusive_ptr<WorkLoom> &work, std::vector<Job> &jobs, bool grouped)
    {
        std::exception_ptr e;
        if (aborted_)
            e = abortedError();
        else {
            try {
                syncCudaStreams();
                runTask(jobs, grouped, nullptr);
            } catch (...) {
                e = std::current_exception();
            }
        }
        work->complete(e);
        retire();
    }

    /*
     * The operation goes on stream_, then a callback (done) that runs its
     * finishes and completes its Work. Behind operations still in flight,
     * its input copies go on the stream too (stage), so they see what those
     * write. An error met while issuing completes the Work from the
     * callback as well, in issue order, once what was issued has ended.
     */
    void issueOnStream(const c10::intrusive_ptr<WorkLoom> &work, std::vector<Job> &jobs,
                       bool grouped)
    {
        auto *p = new Pending{this, work, {}, "operation", nullptr};
        try {
            if (aborted_)
                std::rethrow_exception(abortedError());
            syncCudaStreams();
            {
                std::lock_guard<std::mutex> g(m_);
                deferTo_ = busy_ > 1 ? stream_ : nullptr;
            }
            issuing_ = p;
            p->fins = issueTask(jobs, grouped, stream_);
            p->what = issued_;
        } catch (...) {
            p->error = std::current_exception();
        }
        deferTo_ = nullptr;
        issuing_ = nullptr;
        if (loomStreamAddCallback(stream_, done, p) != loomSuccess) {
            /* out of memory: wait for the operation here instead */
            done(stream_, loomStreamSynchronize(stream_), p);
        }
    }

    /* stream_'s callback after an operation (see Pending); never throws into Loom's thread. */
    static void done(loomStream_t, loomResult_t r, void *arg)
    {
        auto *p = static_cast<Pending *>(arg);
        BackendLoom *b = p->backend;
        std::exception_ptr e = p->error;
        if (!e && r != loomSuccess)
            e = b->aborted_ ? abortedError() : failure(r, p->what, loomGetLastError(nullptr));
        if (!e) {
            try {
                for (auto &f : p->fins)
                    f();
            } catch (...) {
                e = std::current_exception();
            }
        }
        try {
            p->work->complete(e);
        } catch (...) {
        }
        delete p;
        b->retire();
    }

    /* An operation has completed. */
    void retire()
    {
        {
            std::lock_guard<std::mutex> g(m_);
            busy_--;
        }
        idle_.notify_all();
    }

    /*
     * A contiguous tensor that holds what make() gives (sizes, opts). Made
     * now; or, behind operations in flight, a buffer now and the copy into
     * it queued on the stream, so that it sees what they wrote.
     */
    at::Tensor stage(at::IntArrayRef sizes, const at::TensorOptions &opts,
                     std::function<at::Tensor()> make)
    {
        if (!deferTo_)
            return make();
        at::Tensor buf = at::empty(sizes, opts);
        Pending *p = issuing_;
        auto *copy = new std::function<void()>([buf, make, p]() mutable {
            try {
                buf.copy_(make().view(buf.sizes()));
            } catch (...) {
                if (!p->error)
                    p->error = std::current_exception();
            }
        });
        loomResult_t r = loomStreamAddCallback(deferTo_, runCopy, copy);
        if (r != loomSuccess)
            delete copy;
        check(r, "queueing an input copy");
        return buf;
    }
    static void runCopy(loomStream_t, loomResult_t, void *arg)
    {
        auto *copy = static_cast<std::function<void()> *>(arg);
        (*copy)();
        delete copy;
    }
    /* Waits for what is queued on s (nullptr: nothing is), its error left to the callbacks. */
    static void settle(loomStream_t s)
    {
        if (s)
            loomStreamSynchronize(s);
    }
    /* t itself if it is contiguous, else a contiguous copy (stage). */
    at::Tensor contig(const at::Tensor &t)
    {
        if (t.is_contiguous())
            return t;
        return stage(t.sizes(), t.options(), [t] { return t.contiguous(); });
    }
    std::shared_ptr<Dense> dense(const at::Tensor &t)
    {
        return std::make_shared<Dense>(t, contig(t));
    }
    /* The tensors of ts (one dtype) flattened and concatenated (stage). */
    at::Tensor catFlat(const std::vector<at::Tensor> &ts)
    {
        int64_t n = 0;
        for (auto &t : ts)
            n += t.numel();
        return stage({n}, ts[0].options(), [ts] {
            std::vector<at::Tensor> flat;
            for (auto &t : ts)
                flat.push_back(t.reshape({-1}));
            return at::cat(flat);
        });
    }

    /*
     * CUDA tensors: the operation is issued now, from the caller's thread, on
     * a Loom stream over the caller's current CUDA stream, so it is ordered
     * with the kernels around it and the host does not wait for it. The
     * communicator sees every rank's calls in issue order: operations on CPU
     * tensors still in flight finish first, and a later CPU operation
     * synchronizes the CUDA streams before it is issued.
     */
    c10::intrusive_ptr<c10d::Work> runOnCuda(OpType type, std::vector<at::Tensor> outputs,
                                             std::vector<Job> jobs, bool grouped, c10::Device dev)
    {
        std::lock_guard<std::mutex> issue(issueM_);
        waitIdle();
        c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
        c10::Stream cur = impl.getStream(dev);
        loomStream_t ls = cudaStreamFor(cur);
        runTask(jobs, grouped, ls);
        return c10::make_intrusive<WorkLoomCuda>(rank_, type, std::move(outputs), dev, cur,
                                                 [this, ls] {
                                                     loomResult_t r = loomStreamQuery(ls);
                                                     if (r != loomInProgress)
                                                         check(r, "CUDA stream");
                                                 });
    }
    loomStream_t cudaStreamFor(const c10::Stream &cur)
    {
        void *h = cur.native_handle();
        std::lock_guard<std::mutex> g(streamsM_);
        auto it = cudaStreams_.find(h);
        if (it != cudaStreams_.end())
            return it->second;
        loomStream_t ls = nullptr;
        check(loomStreamCreateCuda(&ls, h), "loomStreamCreateCuda");
        cudaStreams_[h] = ls;
        return ls;
    }
    /* Waits for the CUDA operations issued so far (before a CPU operation). */
    void syncCudaStreams()
    {
        std::lock_guard<std::mutex> g(streamsM_);
        for (auto &kv : cudaStreams_)
            check(loomStreamSynchronize(kv.second), "CUDA stream");
    }
    void destroyCudaStreams()
    {
        std::lock_guard<std::mutex> g(streamsM_);
        for (auto &kv : cudaStreams_)
            loomStreamDestroy(kv.second);
        cudaStreams_.clear();
    }
    /* Waits until every operation issued has completed. */
    void waitIdle()
    {
        std::unique_lock<std::mutex> g(m_);
        idle_.wait(g, [this] { return busy_ == 0; });
    }

    /*
     * Issues a task's jobs on Loom stream ls (nullptr: each call runs to its
     * end): one after the other, or all in one Loom group; returns their
     * finishes.
     */
    std::vector<Finish> issueTask(std::vector<Job> &jobs, bool grouped, loomStream_t ls)
    {
        std::vector<Finish> fins;
        if (!grouped) {
            for (auto &j : jobs)
                fins.push_back(j(ls));
            return fins;
        }
        check(loomGroupStart(), "group start");
        try {
            for (auto &j : jobs)
                fins.push_back(j(ls));
        } catch (...) {
            loomGroupEnd(); /* closes the group; it runs nothing after a failed call */
            throw;
        }
        check(loomGroupEnd(), "batch (group end)");
        return fins;
    }
    /* Runs a task's jobs on ls and then their finishes, on this thread. */
    void runTask(std::vector<Job> &jobs, bool grouped, loomStream_t ls)
    {
        if (!grouped) { /* each finish right after its call, as the call has ended */
            for (auto &j : jobs)
                j(ls)();
            return;
        }
        for (auto &f : issueTask(jobs, grouped, ls))
            f();
    }

    /* Waits for the operations in flight (their Works complete) and ends stream_. */
    void stopStream()
    {
        loomStream_t s;
        {
            std::lock_guard<std::mutex> g(m_);
            stop_ = true;
            s = stream_;
            stream_ = nullptr;
        }
        if (s)
            loomStreamDestroy(s);
    }

    void checkTensor(const at::Tensor &t, const char *op)
    {
        TORCH_CHECK(t.device().is_cpu() || t.device().is_cuda(), "torch_loom: ", op,
                    ": only CPU and CUDA tensors (got ", t.device(), ")");
        TORCH_CHECK(t.layout() == at::kStrided, "torch_loom: ", op,
                    ": only dense tensors (got layout ", t.layout(), ")");
    }
    const at::Tensor &one(const std::vector<at::Tensor> &ts, const char *op)
    {
        TORCH_CHECK(ts.size() == 1, "torch_loom: ", op, ": one tensor per process (got ", ts.size(),
                    ")");
        checkTensor(ts[0], op);
        return ts[0];
    }
    void checkRoot(int64_t root, const char *op)
    {
        TORCH_CHECK(root >= 0 && root < size_, "torch_loom: ", op, ": root ", root,
                    " is not a rank of this group (size ", size_, ")");
    }
    void checkPeer(int peer, const char *op)
    {
        TORCH_CHECK(peer >= 0 && peer < size_ && peer != rank_, "torch_loom: ", op, ": peer ", peer,
                    " is not another rank of this group (size ", size_, ", rank ", rank_, ")");
    }
    loomDataType_t reduceTypeOf(const at::Tensor &t, const char *op)
    {
        loomDataType_t type;
        TORCH_CHECK(reduceType(t.scalar_type(), &type), "torch_loom: ", op, ": dtype ",
                    t.scalar_type(),
                    " cannot be reduced by Loom (int8, uint8, int32, int64, uint32, uint64, "
                    "float16, bfloat16, float32, float64 can)");
        return type;
    }
    loomRedOp_t redOp(const c10d::ReduceOp &r, const char *op)
    {
        switch (r.op_) {
        case c10d::ReduceOp::SUM:
            return loomSum;
        case c10d::ReduceOp::AVG:
            return loomAvg;
        case c10d::ReduceOp::PRODUCT:
            return loomProd;
        case c10d::ReduceOp::MIN:
            return loomMin;
        case c10d::ReduceOp::MAX:
            return loomMax;
        default:
            TORCH_CHECK(false, "torch_loom: ", op, ": ReduceOp.", redOpName(r.op_),
                        " is not supported by Loom (SUM, AVG, PRODUCT, MIN, MAX are)");
        }
    }
    void sameShapes(const std::vector<at::Tensor> &list, const at::Tensor &t, const char *op)
    {
        TORCH_CHECK(list.size() == (size_t)size_, "torch_loom: ", op,
                    ": the tensor list needs one tensor per rank (", size_, "), got ", list.size());
        for (auto &x : list) {
            checkTensor(x, op);
            TORCH_CHECK(x.numel() == t.numel() && x.scalar_type() == t.scalar_type() &&
                            x.device() == t.device(),
                        "torch_loom: ", op,
                        ": every tensor in the list must have the size, dtype and device of "
                        "the other argument");
        }
    }
    /* The root's tensor list of gather or scatter, like t; none on the other ranks. */
    std::vector<at::Tensor> rootList(const std::vector<std::vector<at::Tensor>> &lists,
                                     const at::Tensor &t, int64_t root, const char *op)
    {
        checkRoot(root, op);
        if (rank_ != root) {
            TORCH_CHECK(lists.empty() || (lists.size() == 1 && lists[0].empty()),
                        "torch_loom: ", op, ": a tensor list on a rank that is not the root");
            return {};
        }
        TORCH_CHECK(lists.size() == 1, "torch_loom: ", op, ": one tensor list on the root");
        sameShapes(lists[0], t, op);
        return lists[0];
    }
    /* big holds n times small's elements, same dtype. */
    void checkFlat(const at::Tensor &big, const at::Tensor &small, int n, const char *op)
    {
        TORCH_CHECK(big.scalar_type() == small.scalar_type(), "torch_loom: ", op,
                    ": input and output dtypes differ");
        TORCH_CHECK(big.device() == small.device(), "torch_loom: ", op,
                    ": input and output on different devices (", big.device(), " and ",
                    small.device(), ")");
        TORCH_CHECK(big.numel() == small.numel() * n, "torch_loom: ", op, ": the large tensor (",
                    big.numel(), " elements) must hold group size (", n, ") times the small one (",
                    small.numel(), ")");
    }
    void splitCounts(const at::Tensor &t, const std::vector<int64_t> &splits, const char *what,
                     std::vector<size_t> *counts, std::vector<size_t> *displs)
    {
        int64_t rows = t.dim() ? t.size(0) : 1;
        int64_t row = rows ? t.numel() / rows : 0;
        if (splits.empty()) {
            TORCH_CHECK(rows % size_ == 0, "torch_loom: alltoall_base: ", what, " dim 0 (", rows,
                        ") does not divide by the group size (", size_, ")");
            for (int r = 0; r < size_; r++) {
                counts->push_back((size_t)(rows / size_ * row));
                displs->push_back((size_t)(r * (rows / size_) * row));
            }
            return;
        }
        TORCH_CHECK(splits.size() == (size_t)size_, "torch_loom: alltoall_base: ", what,
                    " split sizes need one entry per rank (", size_, "), got ", splits.size());
        int64_t off = 0;
        for (int64_t s : splits) {
            TORCH_CHECK(s >= 0, "torch_loom: alltoall_base: negative split size");
            counts->push_back((size_t)(s * row));
            displs->push_back((size_t)(off * row));
            off += s;
        }
        TORCH_CHECK(off == rows, "torch_loom: alltoall_base: ", what, " split sizes add up to ",
                    off, ", dim 0 is ", rows);
    }

    /* t's bytes, as a flat uint8 tensor (contiguous). */
    static at::Tensor asBytes(const at::Tensor &t)
    {
        at::Tensor c = t.contiguous().reshape({-1});
        if (c.is_complex())
            c = at::view_as_real(c).reshape({-1});
        return c.numel() ? c.view(at::kByte) : at::empty({0}, c.options().dtype(at::kByte));
    }
    /* bytes (from asBytes) as a tensor shaped and typed like like. */
    static at::Tensor fromBytes(const at::Tensor &bytes, const at::Tensor &like)
    {
        at::Tensor c = bytes.contiguous();
        if (!like.numel())
            return like;
        if (like.is_complex())
            return at::view_as_complex(
                       c.view(c10::toRealValueType(like.scalar_type())).reshape({-1, 2}))
                .view(like.sizes());
        return c.view(like.scalar_type()).view(like.sizes());
    }
    Finish gatherInto(const at::Tensor &out, const at::Tensor &in, loomStream_t s)
    {
        auto d = dense(out);
        at::Tensor src = contig(in);
        Wire w = moveWire(src);
        check(loomAllGather(src.data_ptr(), d->ptr(), w.count, w.type, comm_, s), "allgather");
        return [d, src] { d->writeBack(); };
    }
    Finish scatterFrom(const at::Tensor &out, const at::Tensor &in, loomDataType_t type,
                       loomRedOp_t op, loomStream_t s)
    {
        auto d = dense(out);
        at::Tensor src = contig(in);
        check(loomReduceScatter(src.data_ptr(), d->ptr(), (size_t)out.numel(), type, op, comm_, s),
              "reduce_scatter");
        return [d, src] { d->writeBack(); };
    }
    /* AlltoAllv in the tensors' type, or in bytes for a type Loom lacks. */
    Finish exchange(const at::Tensor &out, const at::Tensor &in, std::vector<size_t> sc,
                    std::vector<size_t> sd, std::vector<size_t> rc, std::vector<size_t> rd,
                    const char *what, loomStream_t s)
    {
        auto d = dense(out);
        at::Tensor src = contig(in);
        if (src.data_ptr() == d->ptr()) /* Loom's AlltoAllv is not in place */
            src = stage(src.sizes(), src.options(), [src] { return src.clone(); });
        loomDataType_t type;
        if (!reduceType(src.scalar_type(), &type)) {
            type = loomUint8;
            size_t es = (size_t)src.element_size();
            for (auto *v : {&sc, &sd, &rc, &rd})
                for (auto &x : *v)
                    x *= es;
        }
        /* Loom reads the count arrays when the call runs, at loomGroupEnd in a batch. */
        auto counts = std::make_shared<std::vector<std::vector<size_t>>>(
            std::vector<std::vector<size_t>>{sc, sd, rc, rd});
        auto &v = *counts;
        check(loomAlltoAllv(src.data_ptr(), v[0].data(), v[1].data(), d->ptr(), v[2].data(),
                            v[3].data(), type, comm_, s),
              what);
        return [d, src, counts] { d->writeBack(); };
    }
};

thread_local const char *BackendLoom::issued_ = "operation";

/* Called by torch.distributed for each process group with this backend. */
c10::intrusive_ptr<c10d::Backend> createBackend(const c10::intrusive_ptr<c10d::Store> &store,
                                                int rank, int size,
                                                const std::chrono::duration<float> &timeout,
                                                const std::string &netCompress)
{
    static const std::string key = "torch_loom/uid";
    loomUniqueId id;
    if (rank == 0) {
        loomResult_t r = loomGetUniqueId(&id);
        TORCH_CHECK(r == loomSuccess, "torch_loom: loomGetUniqueId failed (", loomGetErrorString(r),
                    "): ", loomGetLastError(nullptr));
        std::vector<uint8_t> v((uint8_t *)id.internal, (uint8_t *)id.internal + sizeof id);
        store->set(key, v);
    } else {
        std::vector<uint8_t> v = store->get(key);
        TORCH_CHECK(v.size() == sizeof id, "torch_loom: the store holds a unique id of ", v.size(),
                    " bytes, not ", sizeof id);
        memcpy(id.internal, v.data(), sizeof id);
    }
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
    config.timeoutSec = timeoutSec(ms);
    config.netCompress = netCompress.empty() ? nullptr : netCompress.c_str();
    loomComm_t comm = nullptr;
    loomResult_t r = loomCommInitRankConfig(&comm, size, id, rank, &config);
    if (r != loomSuccess)
        C10_THROW_ERROR(DistBackendError,
                        c10::str("torch_loom: loomCommInitRank (rank ", rank, " of ", size,
                                 ") failed (", loomGetErrorString(r),
                                 "): ", loomGetLastError(nullptr)));
    auto b = c10::make_intrusive<BackendLoom>(comm, rank, size, ms);
    b->netCompress_ = netCompress;
    return b;
}

/* b as a Loom backend, or a RuntimeError naming what of op needed one. */
BackendLoom *loomOf(const c10::intrusive_ptr<c10d::Backend> &b, const char *op)
{
    auto *lb = dynamic_cast<BackendLoom *>(b.get());
    TORCH_CHECK(lb, "torch_loom: ", op, ": the group's backend is not loom");
    return lb;
}

} // namespace

PYBIND11_MODULE(_C, m)
{
    m.doc() = "Loom as a torch.distributed backend (import torch_loom registers \"loom\")";
    m.def("create_backend", &createBackend, "creates the Loom backend of one process group",
          pybind11::arg("store"), pybind11::arg("rank"), pybind11::arg("size"),
          pybind11::arg("timeout"), pybind11::arg("net_compress") = std::string(),
          pybind11::call_guard<pybind11::gil_scoped_release>());
    m.def(
        "failed_ranks",
        [](const c10::intrusive_ptr<c10d::Backend> &b) {
            return loomOf(b, "failed_ranks")->failedRanks();
        },
        "ranks of the group's Loom communicator known to have failed", pybind11::arg("backend"));
    m.def(
        "split",
        [](const c10::intrusive_ptr<c10d::Backend> &parent, int color, int key,
           const std::optional<std::chrono::duration<float>> &timeout) {
            BackendLoom *lb = loomOf(parent, "split");
            auto ms = timeout ? std::chrono::duration_cast<std::chrono::milliseconds>(*timeout)
                              : lb->timeout();
            return lb->splitBy(color, key, ms);
        },
        "a backend over loomCommSplit(color, key) of parent's communicator (None for "
        "LOOM_SPLIT_NOCOLOR), with timeout or parent's; collective over parent's ranks",
        pybind11::arg("parent"), pybind11::arg("color"), pybind11::arg("key"),
        pybind11::arg("timeout"), pybind11::call_guard<pybind11::gil_scoped_release>());
    m.attr("SPLIT_NOCOLOR") = LOOM_SPLIT_NOCOLOR;
    m.def(
        "_allreduce_direct",
        [](const c10::intrusive_ptr<c10d::Backend> &b, const at::Tensor &t) {
            loomOf(b, "_allreduce_direct")->allreduceDirect(t);
        },
        "for benchmarks: loomAllReduce (SUM, in place) of t on this thread, past the stream",
        pybind11::arg("backend"), pybind11::arg("tensor"),
        pybind11::call_guard<pybind11::gil_scoped_release>());
    m.def(
        "origin",
        [](const c10::intrusive_ptr<c10d::Backend> &b) {
            return std::string(loomOf(b, "origin")->origin());
        },
        "how the backend's communicator was made: 'unique id', 'split' or 'shrink'",
        pybind11::arg("backend"));
    m.def(
        "loom_version",
        [] {
            int v = 0;
            loomGetVersion(&v);
            return v;
        },
        "LOOM_VERSION_CODE of the linked Loom");
}
