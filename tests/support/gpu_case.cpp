#include "support/gpu_case.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

namespace mgt {

void throw_on_cuda_error(cudaError_t err, const char* what) {
    if (err == cudaSuccess) return;
    (void)cudaGetLastError();  // clear a non-sticky error so that the next case starts clean
    throw CudaFailure(std::string(what) + " -> " + cudaGetErrorName(err) + ": " +
                      cudaGetErrorString(err));
}

// ------------------------------------------------------------------------------------------
// GuardedRegion
// ------------------------------------------------------------------------------------------

GuardedRegion::~GuardedRegion() {
    if (base_) (void)cudaFree(base_);
}

void GuardedRegion::reserve(size_t bytes, size_t offset) {
    if (offset >= 256 || offset % 16 != 0)
        throw std::invalid_argument("GuardedRegion: offset must be a multiple of 16 below 256");
    const size_t need = kBandBytes + offset + bytes + kBandBytes;
    if (need > capacity_) {
        constexpr size_t kGranule = size_t{2} << 20;
        const size_t grown = std::max(need, capacity_ + capacity_ / 2);
        const size_t cap = (grown + kGranule - 1) / kGranule * kGranule;
        if (base_) MGT_CUDA_THROW(cudaFree(base_));
        base_ = nullptr;
        capacity_ = 0;
        void* p = nullptr;
        MGT_CUDA_THROW(cudaMalloc(&p, cap));
        base_ = static_cast<uint8_t*>(p);
        capacity_ = cap;
    }
    offset_ = offset;
    bytes_ = bytes;
}

void GuardedRegion::fill(uint8_t byte, cudaStream_t s) const {
    MGT_CUDA_THROW(cudaMemsetAsync(base_, byte, front_bytes() + bytes_ + back_bytes(), s));
}

void GuardedRegion::fill_payload(uint8_t byte, cudaStream_t s) const {
    if (bytes_) MGT_CUDA_THROW(cudaMemsetAsync(payload(), byte, bytes_, s));
}

std::vector<uint8_t> GuardedRegion::download(cudaStream_t s) const {
    std::vector<uint8_t> out(bytes_);
    if (bytes_)
        MGT_CUDA_THROW(cudaMemcpyAsync(out.data(), payload(), bytes_, cudaMemcpyDeviceToHost, s));
    MGT_CUDA_THROW(cudaStreamSynchronize(s));
    return out;
}

// ------------------------------------------------------------------------------------------
// DeviceChecker
// ------------------------------------------------------------------------------------------

std::string CheckReport::summary() const {
    std::ostringstream os;
    os << checked << " elements checked, " << bad_values << " bad; " << untouched
       << " must-keep-poison elements, " << bad_untouched << " changed; worst |x-ref|/bound "
       << worst_ratio << "; global diff " << global_diff << " (limit " << global_limit
       << (global_bad ? ", EXCEEDED)" : ")") << "; " << bad_tiles << " 128 x 128 tiles over it";
    for (const auto& [name, count] : changed) os << "; " << name << ": " << count << " changed";
    for (const std::string& s : samples) os << "\n    " << s;
    return os.str();
}

double global_diff_limit(moegemm_dtype_t out, int64_t k, moegemm_dtype_t in) {
    const double bias = static_cast<double>(k) / 16.0 * std::ldexp(1.0, -23);
    return std::max(tolerance_for(out, k, in).max_global_diff, 4.0 * bias * bias);
}

namespace {
// Device and pinned memory of a DeviceChecker, released in reverse on any failure.
template <typename T>
void device_alloc(T** p, size_t count) {
    void* raw = nullptr;
    MGT_CUDA_THROW(cudaMalloc(&raw, count * sizeof(T)));
    *p = static_cast<T*>(raw);
}
template <typename T>
void pinned_alloc(T** p, size_t count) {
    void* raw = nullptr;
    MGT_CUDA_THROW(cudaMallocHost(&raw, count * sizeof(T)));
    *p = static_cast<T*>(raw);
}
}  // namespace

DeviceChecker::DeviceChecker() {
    try {
        device_alloc(&stats_, 1);
        device_alloc(&counters_, kMaxCounters);
        device_alloc(&rows_, MOEGEMM_MAX_EXPERTS);
        device_alloc(&offsets_, MOEGEMM_MAX_EXPERTS + 1);
        pinned_alloc(&host_stats_, 1);
        pinned_alloc(&host_counters_, kMaxCounters);
        pinned_alloc(&host_rows_, MOEGEMM_MAX_EXPERTS);
        pinned_alloc(&host_offsets_, MOEGEMM_MAX_EXPERTS + 1);
    } catch (...) {
        release();
        throw;
    }
}

DeviceChecker::~DeviceChecker() { release(); }

void DeviceChecker::release() noexcept {
    for (void* p : {static_cast<void*>(stats_), static_cast<void*>(counters_),
                    static_cast<void*>(rows_), static_cast<void*>(offsets_), scratch_})
        if (p) (void)cudaFree(p);
    scratch_ = nullptr;
    scratch_bytes_ = 0;
    for (void* p : {static_cast<void*>(host_stats_), static_cast<void*>(host_counters_),
                    static_cast<void*>(host_rows_), static_cast<void*>(host_offsets_)})
        if (p) (void)cudaFreeHost(p);
    stats_ = nullptr;
    counters_ = nullptr;
    rows_ = nullptr;
    offsets_ = nullptr;
    host_stats_ = nullptr;
    host_counters_ = nullptr;
    host_rows_ = nullptr;
    host_offsets_ = nullptr;
}

void DeviceChecker::begin(cudaStream_t s) {
    names_.clear();
    has_output_ = false;
    global_limit_ = 0.0;
    MGT_CUDA_THROW(cudaMemsetAsync(stats_, 0, sizeof(gpuref::CheckStats), s));
    MGT_CUDA_THROW(cudaMemsetAsync(counters_, 0, kMaxCounters * sizeof(unsigned long long), s));
}

unsigned long long* DeviceChecker::counter(const std::string& name) {
    if (names_.size() >= static_cast<size_t>(kMaxCounters))
        throw std::logic_error("DeviceChecker: too many byte ranges in one round");
    names_.push_back(name);
    return counters_ + (names_.size() - 1);
}

void DeviceChecker::output(const Geometry& g, moegemm_dtype_t in, moegemm_dtype_t out,
                           const void* a, const void* b, const void* d,
                           const std::vector<int32_t>& sizes, cudaStream_t s,
                           moegemm_scale_mode_t scales, const float* a_scale,
                           const float* b_scale) {
    // The pinned staging below is reused by the next round only after finish() synchronized.
    if (has_output_) throw std::logic_error("DeviceChecker: one output per round");
    if (g.experts < 1 || g.experts > MOEGEMM_MAX_EXPERTS)
        throw std::invalid_argument("DeviceChecker: experts out of range");
    const auto experts = static_cast<size_t>(g.experts);
    int64_t offset = 0;
    host_offsets_[0] = 0;
    for (size_t e = 0; e < experts; ++e) {
        const int32_t rows = g.layout == MOEGEMM_LAYOUT_FIXED ? static_cast<int32_t>(g.max_rows)
                                                              : sizes.at(e);
        host_rows_[e] = rows;
        offset += rows;
        host_offsets_[e + 1] = offset;
    }
    MGT_CUDA_THROW(cudaMemcpyAsync(rows_, host_rows_, experts * sizeof(int32_t),
                                   cudaMemcpyHostToDevice, s));
    MGT_CUDA_THROW(cudaMemcpyAsync(offsets_, host_offsets_, (experts + 1) * sizeof(int64_t),
                                   cudaMemcpyHostToDevice, s));

    if ((in == MOEGEMM_DTYPE_E4M3) != (scales != MOEGEMM_SCALE_NONE) ||
        (scales != MOEGEMM_SCALE_NONE && (!a_scale || !b_scale)))
        throw std::invalid_argument("DeviceChecker: E4M3 inputs need a scale mode and scales");
    const Tolerance tol = tolerance_for(out, g.k, in);
    const gpuref::OutputCheck c{static_cast<int>(g.layout), static_cast<int>(g.weights),
                                static_cast<int>(in), static_cast<int>(out), g.experts, g.n, g.k,
                                g.max_rows, g.total_rows(), a, b, d, rows_, offsets_,
                                static_cast<int>(scales), a_scale, b_scale, tol.rtol, tol.acc,
                                tol.atol, global_diff_limit(out, g.k, in)};
    const size_t scratch = gpuref::check_scratch_bytes(c);
    if (scratch > scratch_bytes_) {
        // Grow-only; no check of this checker is in flight (finish synchronized the last).
        MGT_CUDA_THROW(cudaStreamSynchronize(s));
        if (scratch_) MGT_CUDA_THROW(cudaFree(scratch_));
        scratch_ = nullptr;
        scratch_bytes_ = 0;
        MGT_CUDA_THROW(cudaMalloc(&scratch_, scratch));
        scratch_bytes_ = scratch;
    }
    MGT_CUDA_THROW(gpuref::check_output(c, stats_, scratch_, s));
    has_output_ = true;
    global_limit_ = c.tile_limit;
}

void DeviceChecker::bytes(const std::string& name, const void* p, size_t n, uint8_t pattern,
                          cudaStream_t s) {
    MGT_CUDA_THROW(gpuref::count_bytes_not(p, n, pattern, counter(name), s));
}

void DeviceChecker::bands(const std::string& name, const GuardedRegion& r, uint8_t pattern,
                          cudaStream_t s) {
    bytes(name + " band before", r.front(), r.front_bytes(), pattern, s);
    bytes(name + " band after", r.back(), r.back_bytes(), pattern, s);
}

void DeviceChecker::random_input(const std::string& name, const void* p, size_t count,
                                 moegemm_dtype_t t, uint64_t seed, cudaStream_t s) {
    MGT_CUDA_THROW(
        gpuref::count_random_mismatches(p, count, static_cast<int>(t), seed, counter(name), s));
}

CheckReport DeviceChecker::finish(cudaStream_t s) {
    MGT_CUDA_THROW(cudaMemcpyAsync(host_stats_, stats_, sizeof(gpuref::CheckStats),
                                   cudaMemcpyDeviceToHost, s));
    MGT_CUDA_THROW(cudaMemcpyAsync(host_counters_, counters_,
                                   kMaxCounters * sizeof(unsigned long long),
                                   cudaMemcpyDeviceToHost, s));
    MGT_CUDA_THROW(cudaStreamSynchronize(s));
    const gpuref::CheckStats& st = *host_stats_;
    CheckReport rep;
    rep.checked = static_cast<int64_t>(st.checked);
    rep.bad_values = static_cast<int64_t>(st.bad_values);
    rep.untouched = static_cast<int64_t>(st.untouched);
    rep.bad_untouched = static_cast<int64_t>(st.bad_untouched);
    float worst = 0.0f;
    std::memcpy(&worst, &st.worst_ratio_bits, sizeof worst);
    rep.worst_ratio = worst;
    rep.global_limit = global_limit_;
    const double denom = st.sum_x2 + st.sum_r2;
    rep.global_diff = denom > 0.0 ? st.sum_diff2 / denom : 0.0;
    // A handful of elements says nothing about a bias, and one whose reference cancels to
    // almost zero would dominate it: the global check needs a few dozen elements.
    rep.global_bad = has_output_ && rep.checked >= 32 && !(rep.global_diff <= global_limit_);
    rep.bad_tiles = static_cast<int64_t>(st.bad_tiles);
    const unsigned int taken = std::min<unsigned int>(st.samples_taken, gpuref::kMaxSamples);
    for (unsigned int i = 0; i < taken; ++i) {
        const gpuref::CheckSample& x = st.samples[i];
        std::ostringstream os;
        os << "row " << x.row << " col " << x.col;
        if (x.kind == gpuref::kSampleUntouched) {
            os << ": must keep the poison, holds 0x" << std::hex << x.bits;
        } else if (x.kind == gpuref::kSampleBadTile) {
            os << ": the 128 x 128 tile from here has error ratio " << x.x << " over its bound "
               << x.bound;
        } else {
            os << " (expert " << x.expert << "): got " << x.x << " (0x" << std::hex << x.bits
               << std::dec << "), reference " << x.ref << ", bound " << x.bound;
        }
        rep.samples.push_back(os.str());
    }
    for (size_t i = 0; i < names_.size(); ++i) {
        if (host_counters_[i] != 0)
            rep.changed.emplace_back(names_[i], static_cast<int64_t>(host_counters_[i]));
    }
    return rep;
}

// ------------------------------------------------------------------------------------------
// Cases
// ------------------------------------------------------------------------------------------

std::string CaseSpec::str() const {
    std::ostringstream os;
    os << g.str() << " in=" << dtype_name(in) << " out=" << dtype_name(out);
    if (scale_mode != MOEGEMM_SCALE_NONE) os << " scale_mode=" << static_cast<int>(scale_mode);
    os
       << " backend=" << backend_name(backend) << " sizes_from=" << sizes_from_name(sizes_from);
    if (!force_kernel.empty()) os << " force_kernel=" << force_kernel;
    if (expected_rows) os << " expected_rows=" << expected_rows;
    os << " seed=" << seed << " offsets(a,b,d)=" << a_offset << "," << b_offset << ","
       << d_offset << (null_workspace ? " null_workspace" : "")
       << (default_stream ? " stream=legacy" : " stream=created");
    if (g.layout != MOEGEMM_LAYOUT_FIXED) {
        for (size_t r = 0; r < rounds.size(); ++r) os << " round" << r << "=" << sizes_str(rounds[r]);
    } else {
        os << " rounds=" << rounds.size();
    }
    return os.str();
}

std::string describe_field(const std::string& text, const std::string& key) {
    const std::string pattern = key + "=";
    size_t at = text.find(pattern);
    while (at != std::string::npos && at != 0 && text[at - 1] != ' ')
        at = text.find(pattern, at + 1);
    if (at == std::string::npos) return "";
    const size_t begin = at + pattern.size();
    const size_t end = text.find(' ', begin);
    return text.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

namespace {

std::string describe_plan(moegemm_plan_t plan) {
    char buf[MOEGEMM_DESCRIBE_MAX] = {};
    const moegemm_status_t st = moegemm_plan_describe(plan, buf, sizeof buf);
    if (st != MOEGEMM_STATUS_SUCCESS) return std::string("(describe failed: ") + moegemm_status_name(st) + ")";
    return std::string(buf);
}

}  // namespace

CaseRun::CaseRun(const CaseSpec& spec, CaseBuffers& buffers, cudaStream_t stream)
    : spec_(spec), bufs_(buffers), stream_(spec.default_stream ? nullptr : stream) {
    try {
        int device = 0;
        MGT_CUDA_THROW(cudaGetDevice(&device));
        moegemm_problem_t problem;
        moegemm_problem_init(&problem);
        problem.layout = spec_.g.layout;
        problem.weight_layout = spec_.g.weights;
        problem.num_experts = spec_.g.experts;
        problem.n = spec_.g.n;
        problem.k = spec_.g.k;
        problem.max_rows = spec_.g.max_rows;
        problem.a_type = problem.b_type = spec_.in;
        problem.d_type = spec_.out;
        problem.scale_mode = spec_.scale_mode;
        problem.backend = spec_.backend;
        problem.device = device;
        problem.expected_rows = spec_.expected_rows;
        problem.force_kernel = spec_.force_kernel.empty() ? nullptr : spec_.force_kernel.c_str();
        const Outcome created = outcome(create_plan(problem, &plan_));
        if (created.status != MOEGEMM_STATUS_SUCCESS) {
            plan_ = nullptr;
            state_ = skip_or_fail("moegemm_plan_create", created);
            return;
        }
        const Outcome ws = outcome(moegemm_plan_get_workspace_size(plan_, &ws_bytes_));
        const Outcome word = outcome(moegemm_plan_get_status_word(plan_, &status_word_));
        if (ws.status != MOEGEMM_STATUS_SUCCESS || word.status != MOEGEMM_STATUS_SUCCESS ||
            status_word_ == nullptr) {
            state_ = fail("get_workspace_size -> " + ws.str() + ", get_status_word -> " +
                          word.str());
            return;
        }
        state_.plan = describe_plan(plan_);
        setup(stream_);
    } catch (const std::exception& e) {
        state_ = fail(e.what());
        state_.fatal = dynamic_cast<const CudaFailure*>(&e) != nullptr;
    }
}

CaseRun::CaseRun(const CaseSpec& spec, CaseBuffers& buffers, cudaStream_t stream,
                 const CaseRun& owner)
    : spec_(spec), bufs_(buffers), stream_(spec.default_stream ? nullptr : stream),
      plan_(owner.plan_), owns_plan_(false), ws_bytes_(owner.ws_bytes_) {
    state_ = owner.state_;
    if (!state_.passed()) return;
    try {
        setup(stream_);
    } catch (const std::exception& e) {
        state_ = fail(e.what());
        state_.fatal = dynamic_cast<const CudaFailure*>(&e) != nullptr;
    }
}

CaseRun::~CaseRun() {
    // Executions must have finished before the plan (or the buffers) go.
    (void)cudaStreamSynchronize(stream_);
    if (owns_plan_ && plan_) (void)moegemm_plan_destroy(plan_);
}

void CaseRun::setup(cudaStream_t s) {
    const Geometry& g = spec_.g;
    const size_t in_bytes = dtype_bytes(spec_.in);
    bufs_.a.reserve(g.a_elems() * in_bytes, spec_.a_offset);
    bufs_.a.fill(kInputBandByte, s);
    MGT_CUDA_THROW(gpuref::fill_random(bufs_.a.payload(), g.a_elems(), static_cast<int>(spec_.in),
                                       spec_.seed, s));
    bufs_.b.reserve(g.b_elems() * in_bytes, spec_.b_offset);
    bufs_.b.fill(kInputBandByte, s);
    MGT_CUDA_THROW(gpuref::fill_random(bufs_.b.payload(), g.b_elems(), static_cast<int>(spec_.in),
                                       spec_.seed + 1, s));
    // E4M3 scales (16-byte aligned, as the API asks), checked unchanged like A and B.
    if (spec_.scale_mode != MOEGEMM_SCALE_NONE) {
        const auto [a_scales, b_scales] = scale_counts(g, spec_.scale_mode);
        bufs_.a_scale.reserve(a_scales * sizeof(float), 0);
        bufs_.a_scale.fill(kInputBandByte, s);
        MGT_CUDA_THROW(gpuref::fill_random(bufs_.a_scale.payload(), a_scales, MOEGEMM_DTYPE_F32,
                                           spec_.seed + 2, s));
        bufs_.b_scale.reserve(b_scales * sizeof(float), 0);
        bufs_.b_scale.fill(kInputBandByte, s);
        MGT_CUDA_THROW(gpuref::fill_random(bufs_.b_scale.payload(), b_scales, MOEGEMM_DTYPE_F32,
                                           spec_.seed + 3, s));
    }
    bufs_.d.reserve(g.d_elems() * dtype_bytes(spec_.out), spec_.d_offset);
    bufs_.d.fill(kPoisonByte, s);
    bufs_.workspace.reserve(ws_bytes_, 0);
    bufs_.workspace.fill(kWorkspaceBandByte, s);
    bufs_.sizes.reserve(static_cast<size_t>(g.experts) * sizeof(int32_t), 0);
    bufs_.sizes.fill(kSizesBandByte, s);
}

CaseResult CaseRun::fail(const std::string& what) const {
    CaseResult r = state_;
    r.kind = CaseResult::Kind::Failed;
    r.message = what + "\n  case: " + spec_.str() + "\n  plan: " + state_.plan;
    return r;
}

CaseResult CaseRun::skip_or_fail(const char* call, const Outcome& o) const {
    if (o.status != MOEGEMM_STATUS_NOT_SUPPORTED) return fail(std::string(call) + " -> " + o.str());
    CaseResult r = state_;
    r.kind = CaseResult::Kind::Skipped;
    r.message = std::string(call) + " -> " + o.str();
    return r;
}

CaseResult CaseRun::prepare(size_t r) {
    if (!state_.passed()) return state_;
    if (r >= spec_.rounds.size()) return fail("test bug: no round " + std::to_string(r));
    try {
        raw_ = spec_.rounds[r];
        const Geometry& g = spec_.g;
        if (spec_.sizes_from == SizesFrom::None) {
            raw_.assign(static_cast<size_t>(g.experts), 0);  // ignored: full slabs
        } else if (raw_.size() != static_cast<size_t>(g.experts)) {
            return fail("test bug: round " + std::to_string(r) + " has the wrong number of sizes");
        }
        expected_ = clamp_sizes(g, raw_);
        if (spec_.sizes_from == SizesFrom::Host && owns_plan_) {
            const Outcome o = outcome(
                moegemm_plan_set_expert_sizes(plan_, raw_.data(), MOEGEMM_MEMORY_HOST));
            if (o.status != MOEGEMM_STATUS_SUCCESS)
                return state_ = skip_or_fail("moegemm_plan_set_expert_sizes(HOST)", o);
        } else if (spec_.sizes_from == SizesFrom::Device) {
            // raw_ outlives the copy: it is only replaced by the next prepare, after a check.
            MGT_CUDA_THROW(cudaMemcpyAsync(bufs_.sizes.payload(), raw_.data(),
                                           raw_.size() * sizeof(int32_t), cudaMemcpyHostToDevice,
                                           stream_));
            if (owns_plan_ && !device_sizes_set_) {
                const Outcome o = outcome(moegemm_plan_set_expert_sizes(
                    plan_, reinterpret_cast<const int32_t*>(bufs_.sizes.payload()),
                    MOEGEMM_MEMORY_DEVICE));
                if (o.status != MOEGEMM_STATUS_SUCCESS)
                    return state_ = skip_or_fail("moegemm_plan_set_expert_sizes(DEVICE)", o);
                device_sizes_set_ = true;
            }
        }
        if (owns_plan_) {
            size_t ws = 0;
            const Outcome o = outcome(moegemm_plan_get_workspace_size(plan_, &ws));
            if (o.status != MOEGEMM_STATUS_SUCCESS || ws != ws_bytes_) {
                return fail("the workspace size changed when sizes were set: " +
                            std::to_string(ws_bytes_) + " -> " + std::to_string(ws) + " (" +
                            o.str() + ")");
            }
            state_.plan = describe_plan(plan_);
            state_.native = describe_field(state_.plan, "backend") == "native";
        }
        return state_;
    } catch (const std::exception& e) {
        CaseResult res = fail(e.what());
        res.fatal = dynamic_cast<const CudaFailure*>(&e) != nullptr;
        return res;
    }
}

CaseResult CaseRun::launch() {
    const CaseResult poisoned = poison_output();
    if (!poisoned.passed()) return poisoned;
    void* ws = ws_bytes_ == 0 && spec_.null_workspace ? nullptr : bufs_.workspace.payload();
    return execute_with(ws, ws_bytes_);
}

CaseResult CaseRun::poison_output() {
    if (!state_.passed()) return state_;
    try {
        bufs_.d.fill(kPoisonByte, stream_);
        if (owns_plan_) MGT_CUDA_THROW(cudaMemsetAsync(status_word_, 0, sizeof(uint32_t), stream_));
        return state_;
    } catch (const std::exception& e) {
        CaseResult res = fail(e.what());
        res.fatal = dynamic_cast<const CudaFailure*>(&e) != nullptr;
        return res;
    }
}

CaseResult CaseRun::execute_with(void* workspace, size_t workspace_bytes) {
    if (!state_.passed()) return state_;
    const Outcome o = outcome(moegemm_execute(plan_, bufs_.a.payload(), bufs_.b.payload(),
                                              bufs_.d.payload(), a_scale(), b_scale(), workspace,
                                              workspace_bytes, stream_));
    if (o.status != MOEGEMM_STATUS_SUCCESS) return fail("moegemm_execute -> " + o.str());
    return state_;
}

CaseResult CaseRun::check(DeviceChecker& checker) {
    if (!state_.passed()) return state_;
    try {
        const Geometry& g = spec_.g;
        checker.begin(stream_);
        checker.output(g, spec_.in, spec_.out, bufs_.a.payload(), bufs_.b.payload(),
                       bufs_.d.payload(), expected_.sizes, stream_, spec_.scale_mode, a_scale(),
                       b_scale());
        checker.bands("A", bufs_.a, kInputBandByte, stream_);
        checker.bands("B", bufs_.b, kInputBandByte, stream_);
        if (spec_.scale_mode != MOEGEMM_SCALE_NONE) {
            const auto [a_scales, b_scales] = scale_counts(g, spec_.scale_mode);
            checker.bands("a_scale", bufs_.a_scale, kInputBandByte, stream_);
            checker.bands("b_scale", bufs_.b_scale, kInputBandByte, stream_);
            checker.random_input("a_scale (input written)", bufs_.a_scale.payload(), a_scales,
                                 MOEGEMM_DTYPE_F32, spec_.seed + 2, stream_);
            checker.random_input("b_scale (input written)", bufs_.b_scale.payload(), b_scales,
                                 MOEGEMM_DTYPE_F32, spec_.seed + 3, stream_);
        }
        checker.bands("D", bufs_.d, kPoisonByte, stream_);
        checker.bands("workspace", bufs_.workspace, kWorkspaceBandByte, stream_);
        checker.bands("device sizes", bufs_.sizes, kSizesBandByte, stream_);
        checker.random_input("A (input written)", bufs_.a.payload(), g.a_elems(), spec_.in,
                             spec_.seed, stream_);
        checker.random_input("B (input written)", bufs_.b.payload(), g.b_elems(), spec_.in,
                             spec_.seed + 1, stream_);
        const CheckReport rep = checker.finish(stream_);

        std::string problems;
        if (!rep.ok()) problems += rep.summary();
        // An oracle that compared fewer elements than the sizes give would pass a kernel that
        // skipped rows: the count must be exact.
        int64_t valid_rows = 0;
        for (const int32_t m : expected_.sizes) valid_rows += m;
        if (g.layout == MOEGEMM_LAYOUT_FIXED) valid_rows = g.experts * g.max_rows;
        if (rep.checked != valid_rows * g.n)
            problems += "\n    the oracle compared " + std::to_string(rep.checked) +
                        " elements; the sizes give " + std::to_string(valid_rows * g.n);
        if (spec_.sizes_from == SizesFrom::Device) {
            const std::vector<uint8_t> now = bufs_.sizes.download(stream_);
            if (now.size() != raw_.size() * sizeof(int32_t) ||
                std::memcmp(now.data(), raw_.data(), now.size()) != 0)
                problems += "\n    the device sizes were written by the library";
        }
        if (owns_plan_) {
            uint32_t word = 0xDEADBEEFu;
            MGT_CUDA_THROW(cudaMemcpyAsync(&word, status_word_, sizeof word,
                                           cudaMemcpyDeviceToHost, stream_));
            MGT_CUDA_THROW(cudaStreamSynchronize(stream_));
            // Only native kernels read device sizes (and flag what they clamp); cuBLASLt and
            // host sizes leave the word at 0 (moegemm_plan_get_status_word).
            const uint32_t want =
                spec_.sizes_from == SizesFrom::Device && state_.native ? expected_.flags : 0u;
            if (word != want)
                problems += "\n    status word " + clamp_flags_str(word) + ", expected " +
                            clamp_flags_str(want);
        }
        if (!problems.empty()) return fail("wrong result: " + problems);
        ++state_.rounds;
        state_.elements += rep.checked;
        return state_;
    } catch (const std::exception& e) {
        CaseResult res = fail(e.what());
        res.fatal = dynamic_cast<const CudaFailure*>(&e) != nullptr;
        return res;
    }
}

CaseResult CaseRun::round(size_t r, DeviceChecker& checker) {
    CaseResult res = prepare(r);
    if (!res.passed()) return res;
    res = launch();
    if (!res.passed()) return res;
    return check(checker);
}

void CaseRun::fill_workspace(uint8_t byte) const { bufs_.workspace.fill_payload(byte, stream_); }

std::vector<uint8_t> CaseRun::download_output() const { return bufs_.d.download(stream_); }

// Whether the documented rules say the case's backend cannot serve it (then NOT_SUPPORTED is
// the right answer): native kernels need sm_90 (a forced TMA-store variant writes 16-bit
// outputs only; clusters of 2 need an even number of column tiles; swap-AB takes no BLOCK
// scales); cuBLASLt writes the input type or F32 and needs host sizes for VARIABLE. E4M3
// (moegemm_dtype_t): BF16 or F32 out and [E, N, K] weights everywhere, cuBLASLt PER_TENSOR
// scales only on compute capability 8.9+.
bool documented_not_supported(const CaseSpec& c, int cc) {
    const bool sm90 = cc == 90;
    const bool fp8 = c.in == MOEGEMM_DTYPE_E4M3;
    if (fp8 && (c.out == MOEGEMM_DTYPE_F16 || c.g.weights != MOEGEMM_WEIGHTS_NK)) return true;
    const bool native =
        sm90 && forced_kernel_serves(c.force_kernel, c.g, c.out, c.in, c.scale_mode);
    const bool cublaslt =
        (fp8 ? c.scale_mode == MOEGEMM_SCALE_PER_TENSOR && cc >= 89
             : c.out == c.in || c.out == MOEGEMM_DTYPE_F32) &&
        !(c.g.layout == MOEGEMM_LAYOUT_VARIABLE && c.sizes_from == SizesFrom::Device);
    switch (c.backend) {
        case MOEGEMM_BACKEND_NATIVE: return !native;
        case MOEGEMM_BACKEND_CUBLASLT: return !cublaslt;
        default: return !(sm90 || cublaslt);
    }
}

CaseResult run_case(const CaseSpec& spec, CaseBuffers& buffers, DeviceChecker& checker,
                    cudaStream_t stream) {
    CaseRun run(spec, buffers, stream);
    if (!run.state().passed()) return run.state();
    CaseResult res = run.state();
    for (size_t r = 0; r < spec.rounds.size(); ++r) {
        res = run.round(r, checker);
        if (!res.passed()) return res;
    }
    return res;
}

}  // namespace mgt
