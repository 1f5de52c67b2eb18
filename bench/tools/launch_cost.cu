// CPU cost of launching a kernel, by parameter size and launch API: what bounds the host cost
// of moegemm_execute, whose native kernels take ~5 KB of parameters (host sizes by value) and
// are launched with cudaLaunchKernelEx and a cluster attribute. Prints the median over 20
// batches of 200 launches of thread CPU time per launch, in microseconds. The last column
// launches through the driver (cuLaunchKernelEx, reached with cudaGetDriverEntryPointByVersion,
// on the CUfunction that cudaGetFuncBySymbol returns once): the runtime's per-launch lookups
// are skipped. Then the GPU side: event-timed time of one launch (an event before and after it,
// as moegemm-bench times a repetition) and per launch of 200 back to back, of the same empty
// kernel on 132 CTAs of 384 threads with a cluster of 2 and the shared memory of a decode
// kernel, by parameter size: what a launch costs the GPU before and after its CTAs run.
// First the worth of a smaller parameter block, launched into a busy queue, A B A B
// (measure_parameter_block_ab), and one parameter against the library's two (map templates +
// struct) of the same total size (measure_two_parameter_ab; LAUNCH_COST_AB_ONLY=1 stops after
// these two); then whether a queue of pending kernels makes launches dearer,
// by parameter size and with the PDL attribute (measure_busy_queue).
// Last, the fixed cost of an event-timed launch that does work: a kernel whose 132 CTAs spin
// for a set time, event-timed as above, against the span of its CTAs (the first CTA's entry to
// the last CTA's exit, by globaltimer): event time - span is what any kernel timed this way pays
// on top of its own work, the bound on the fraction of a bandwidth floor a short launch can show.
//
//   nvcc -O2 -std=c++17 -arch=sm_90a -Ibench/tools bench/tools/launch_cost.cu -o launch_cost && ./launch_cost
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>

#include "event_timing.cuh"

template <int Bytes>
struct Params {
    unsigned char bytes[Bytes];
};

template <int Bytes>
__global__ void empty_kernel(const __grid_constant__ Params<Bytes> p) {
    if (p.bytes[0] == 255 && threadIdx.x == 1000) printf("never\n");
}

// Each CTA spins `nanoseconds` (globaltimer) and records its entry and exit in span[2 * block].
__global__ void stamped_spin_kernel(long long nanoseconds, unsigned long long* span) {
    const unsigned long long start = global_timer();
    unsigned long long now = start;
    while (now - start < static_cast<unsigned long long>(nanoseconds)) now = global_timer();
    if (threadIdx.x == 0) {
        span[2 * blockIdx.x] = start;
        span[2 * blockIdx.x + 1] = now;
    }
}

// What a decode GEMM looks like to the launch path: `Bytes` of parameters, and CTAs that stay
// for `nanoseconds`, so that a batch of launches leaves a queue of pending kernels behind it.
template <int Bytes>
__global__ void busy_kernel(const __grid_constant__ Params<Bytes> p, long long nanoseconds) {
    const unsigned long long start = global_timer();
    while (global_timer() - start < static_cast<unsigned long long>(nanoseconds)) {
    }
    if (p.bytes[0] == 255 && threadIdx.x == 1000) printf("never\n");
}

// The library's kernels take two parameters: the tensor-map templates (five 64-byte-aligned
// CUtensorMaps, 640 bytes) and the parameter struct (4256 bytes; 1712 with session 25's
// 388-int block). Does a launch of two parameters cost what one of the same total size does?
struct alignas(64) MapTemplates {
    unsigned char bytes[640];
};

template <int Bytes>
__global__ void busy_two_parameter_kernel(const __grid_constant__ MapTemplates maps,
                                          const __grid_constant__ Params<Bytes> p) {
    const unsigned long long start = global_timer();
    while (global_timer() - start < 200000ull) {
    }
    if (p.bytes[0] == 255 && maps.bytes[0] == 255 && threadIdx.x == 1000) printf("never\n");
}

double thread_seconds() {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

template <typename Launch>
double median_us(Launch launch, cudaStream_t stream, int per_batch = 200) {
    std::vector<double> per_launch;
    for (int batch = 0; batch < 21; ++batch) {
        cudaStreamSynchronize(stream);
        const double start = thread_seconds();
        for (int i = 0; i < per_batch; ++i) launch();
        const double seconds = thread_seconds() - start;
        if (batch > 0) per_launch.push_back(1e6 * seconds / per_batch);  // batch 0 warms up
    }
    std::sort(per_launch.begin(), per_launch.end());
    return per_launch[per_launch.size() / 2];
}

using LaunchKernelEx = CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**);

/// A launch of 132 CTAs of 384 threads with `shared_bytes` of dynamic shared memory on
/// `stream`, in clusters of 2 (`cluster` holds the attribute the config points to).
cudaLaunchConfig_t cluster_launch(cudaStream_t stream, int shared_bytes,
                                  cudaLaunchAttribute& cluster) {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(132);
    config.blockDim = dim3(384);
    config.dynamicSmemBytes = shared_bytes;
    config.stream = stream;
    cluster = cudaLaunchAttribute{};
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = 2;
    cluster.val.clusterDim.y = 1;
    cluster.val.clusterDim.z = 1;
    config.attrs = &cluster;
    config.numAttrs = 1;
    return config;
}

template <int Bytes>
void measure(cudaStream_t stream, LaunchKernelEx driver_launch) {
    Params<Bytes> p{};
    const double plain = median_us([&] { empty_kernel<Bytes><<<132, 384, 0, stream>>>(p); }, stream);
    cudaLaunchAttribute cluster{};
    cudaLaunchConfig_t config = cluster_launch(stream, 0, cluster);
    config.numAttrs = 0;  // first without the cluster
    const double ex = median_us([&] { cudaLaunchKernelEx(&config, empty_kernel<Bytes>, p); }, stream);
    config.numAttrs = 1;
    const double ex_cluster =
        median_us([&] { cudaLaunchKernelEx(&config, empty_kernel<Bytes>, p); }, stream);
    cudaFunction_t function = nullptr;
    cudaGetFuncBySymbol(&function, reinterpret_cast<const void*>(empty_kernel<Bytes>));
    CUlaunchAttribute driver_cluster{};
    driver_cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    driver_cluster.value.clusterDim.x = 2;
    driver_cluster.value.clusterDim.y = 1;
    driver_cluster.value.clusterDim.z = 1;
    CUlaunchConfig driver_config{};
    driver_config.gridDimX = 132;
    driver_config.gridDimY = driver_config.gridDimZ = 1;
    driver_config.blockDimX = 384;
    driver_config.blockDimY = driver_config.blockDimZ = 1;
    driver_config.hStream = stream;
    driver_config.attrs = &driver_cluster;
    driver_config.numAttrs = 1;
    void* arguments[] = {&p};
    const double driver_cluster_us = median_us(
        [&] {
            driver_launch(&driver_config, reinterpret_cast<CUfunction>(function), arguments,
                          nullptr);
        },
        stream);
    std::printf("%6d bytes of parameters: <<<>>> %.2f us, cudaLaunchKernelEx %.2f us, "
                "with a cluster attribute %.2f us, cuLaunchKernelEx with a cluster %.2f us\n",
                Bytes, plain, ex, ex_cluster, driver_cluster_us);
}

template <int Bytes>
void measure_gpu(cudaStream_t stream, int shared_bytes) {
    Params<Bytes> p{};
    cudaFuncSetAttribute(empty_kernel<Bytes>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         shared_bytes);
    cudaLaunchAttribute cluster{};
    const cudaLaunchConfig_t config = cluster_launch(stream, shared_bytes, cluster);
    cudaEvent_t before, after;
    cudaEventCreate(&before);
    cudaEventCreate(&after);
    auto launch = [&] { cudaLaunchKernelEx(&config, empty_kernel<Bytes>, p); };
    for (int i = 0; i < 100; ++i) launch();
    // Every (event, launch, event) is queued behind a kernel that spins for 10 ms, so that the
    // GPU never waits for the CPU to submit the next one: the pairs time the GPU side alone.
    std::vector<double> single = event_pair_times(
        launch, stream, 200, [&] { spin_kernel<<<1, 1, 0, stream>>>(10'000'000); });
    std::sort(single.begin(), single.end());
    std::vector<float> batch;
    for (int b = 0; b < 11; ++b) {
        spin_kernel<<<1, 1, 0, stream>>>(2'000'000);
        cudaEventRecord(before, stream);
        for (int i = 0; i < 200; ++i) launch();
        cudaEventRecord(after, stream);
        cudaEventSynchronize(after);
        float ms = 0;
        cudaEventElapsedTime(&ms, before, after);
        batch.push_back(1000 * ms / 200);
    }
    std::sort(batch.begin(), batch.end());
    std::printf("GPU, %6d bytes of parameters, %d bytes of shared memory: one launch between "
                "queued events %.2f us (min %.2f), back to back %.2f us per launch (%s)\n",
                Bytes, shared_bytes, single[single.size() / 2], single[0],
                batch[batch.size() / 2], cudaGetErrorString(cudaGetLastError()));
    cudaEventDestroy(before);
    cudaEventDestroy(after);
}

// A decode GEMM's launch shape for busy_kernel: 132 CTAs of 384 threads with 220 KB of shared
// memory on `stream`, with the programmatic-serialization attribute (held by `attribute`) when
// `dependent`; sets the kernel's shared-memory limit for each parameter size in `Bytes...`.
constexpr int kBusyShared = 220 * 1024;
template <int... Bytes>
cudaLaunchConfig_t busy_launch(cudaStream_t stream, bool dependent, cudaLaunchAttribute& attribute) {
    (cudaFuncSetAttribute(busy_kernel<Bytes>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          kBusyShared),
     ...);
    // cluster_launch's shape, with the PDL attribute in place of the cluster.
    cudaLaunchConfig_t config = cluster_launch(stream, kBusyShared, attribute);
    attribute = cudaLaunchAttribute{};
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    config.numAttrs = dependent ? 1 : 0;
    return config;
}

// Host cost of a launch with `Bytes` of parameters and 220 KB of shared memory whose CTAs run
// `busy_ns` (0: an empty kernel, what moegemm-bench's bare launch was until session 25), with or without the
// programmatic-serialization attribute (the library's decode launches carry it), by batch size:
// does a queue of pending kernels (moegemm-bench times batches of 100 decode GEMMs of 50-450
// us) make each launch dearer than the bare launch it is compared with, and does the parameter
// size or the attribute matter there?
template <int Bytes>
void measure_busy_queue(cudaStream_t stream, bool dependent) {
    Params<Bytes> p{};
    cudaLaunchAttribute attribute{};
    const cudaLaunchConfig_t config = busy_launch<Bytes>(stream, dependent, attribute);
    std::printf("busy queue, %5d bytes%s (us per launch, batches of 10 / 100 / 200):", Bytes,
                dependent ? ", PDL" : "     ");
    for (long long busy_ns : {0ll, 200000ll, 0ll}) {
        std::printf("  kernel of %3lld us:", busy_ns / 1000);
        for (int per_batch : {10, 100, 200}) {
            const double us = median_us(
                [&] { cudaLaunchKernelEx(&config, busy_kernel<Bytes>, p, busy_ns); }, stream,
                per_batch);
            std::printf(" %.2f", us);
        }
    }
    std::printf(" (%s)\n", cudaGetErrorString(cudaGetLastError()));
}

// The parameter block's worth, interleaved (the machines drift by ~1 µs between passes): PDL
// launches of kernels that stay 200 µs, batches of 100, with 4896 bytes of parameters (the
// library's) and 2352 (its block with 388 ints of host sizes instead of 1024), A B A B.
// (Session 25's calls 11 and 16 ran it with 5504 and 2432 bytes.)
void measure_parameter_block_ab(cudaStream_t stream) {
    Params<4896> large{};
    Params<2352> small{};
    cudaLaunchAttribute attribute{};
    const cudaLaunchConfig_t config = busy_launch<4896, 2352>(stream, true, attribute);
    constexpr long long kBusyNs = 200000;
    double sum_large = 0, sum_small = 0;
    std::printf("parameter block A/B, busy queue, PDL, batches of 100 (4896 B / 2352 B):");
    constexpr int kPairs = 8;
    for (int pair = 0; pair < kPairs; ++pair) {
        const double l = median_us(
            [&] { cudaLaunchKernelEx(&config, busy_kernel<4896>, large, kBusyNs); }, stream, 100);
        const double m = median_us(
            [&] { cudaLaunchKernelEx(&config, busy_kernel<2352>, small, kBusyNs); }, stream, 100);
        std::printf(" %.2f/%.2f", l, m);
        sum_large += l;
        sum_small += m;
    }
    std::printf("; means %.2f / %.2f us (%s)\n", sum_large / kPairs, sum_small / kPairs,
                cudaGetErrorString(cudaGetLastError()));
}

// One parameter against the library's two of the same total size (4896 and 2352 bytes), PDL
// launches of kernels that stay 200 µs, batches of 100, interleaved (session 25 found the
// library's launch gaining a third of what a bare launch gained from the smaller block).
void measure_two_parameter_ab(cudaStream_t stream) {
    Params<4896> one_large{};
    Params<2352> one_small{};
    MapTemplates maps{};
    Params<4256> two_large{};
    Params<1712> two_small{};
    cudaLaunchAttribute attribute{};
    const cudaLaunchConfig_t config = busy_launch<4896, 2352>(stream, true, attribute);
    cudaFuncSetAttribute(busy_two_parameter_kernel<4256>,
                         cudaFuncAttributeMaxDynamicSharedMemorySize, kBusyShared);
    cudaFuncSetAttribute(busy_two_parameter_kernel<1712>,
                         cudaFuncAttributeMaxDynamicSharedMemorySize, kBusyShared);
    constexpr long long kBusyNs = 200000;
    constexpr int kRounds = 8;
    double sums[4] = {};
    std::printf("one parameter / two, busy queue, PDL, batches of 100 (4896 B one, two; 2352 B "
                "one, two):");
    for (int round = 0; round < kRounds; ++round) {
        const double us[4] = {
            median_us([&] { cudaLaunchKernelEx(&config, busy_kernel<4896>, one_large, kBusyNs); },
                      stream, 100),
            median_us([&] {
                cudaLaunchKernelEx(&config, busy_two_parameter_kernel<4256>, maps, two_large);
            }, stream, 100),
            median_us([&] { cudaLaunchKernelEx(&config, busy_kernel<2352>, one_small, kBusyNs); },
                      stream, 100),
            median_us([&] {
                cudaLaunchKernelEx(&config, busy_two_parameter_kernel<1712>, maps, two_small);
            }, stream, 100)};
        std::printf(" %.2f/%.2f/%.2f/%.2f", us[0], us[1], us[2], us[3]);
        for (int i = 0; i < 4; ++i) sums[i] += us[i];
    }
    std::printf("; means %.2f / %.2f / %.2f / %.2f us (%s)\n", sums[0] / kRounds,
                sums[1] / kRounds, sums[2] / kRounds, sums[3] / kRounds,
                cudaGetErrorString(cudaGetLastError()));
}

// Event time of one launch of 132 spinning CTAs (median of 200, between queued events, as
// moegemm-bench times a repetition) against the median span of its CTAs.
void measure_fixed_cost(cudaStream_t stream, long long spin_ns) {
    constexpr int kCtas = 132;
    unsigned long long* span = nullptr;
    cudaMalloc(&span, 2 * kCtas * sizeof(unsigned long long));
    const EventTiming t = time_queued_launch(
        [&] { stamped_spin_kernel<<<kCtas, 128, 0, stream>>>(spin_ns, span); }, span, kCtas,
        stream, 200);
    std::printf("GPU, %d CTAs spinning %.0f us: event time %.2f us, CTA span %.2f us, fixed cost "
                "%.2f us (%s)\n", kCtas, 1e-3 * spin_ns, t.event_us, t.span_us,
                t.event_us - t.span_us, cudaGetErrorString(cudaGetLastError()));
    cudaFree(span);
}

int main() {
    cudaStream_t stream;
    if (cudaStreamCreate(&stream) != cudaSuccess) {
        std::printf("no GPU\n");
        return 2;
    }
    int device_value = 0;
    cudaGetDevice(&device_value);
    const double get_device = median_us([&] { cudaGetDevice(&device_value); }, stream);
    cudaStreamCaptureStatus capture{};
    const double is_capturing = median_us([&] { cudaStreamIsCapturing(stream, &capture); }, stream);
    const double stream_device =
        median_us([&] { cudaStreamGetDevice(stream, &device_value); }, stream);
    void* buffer = nullptr;
    cudaMalloc(&buffer, 1 << 20);
    cudaPointerAttributes attributes{};
    const double pointer_attributes = median_us(
        [&] { cudaPointerGetAttributes(&attributes, static_cast<char*>(buffer) + 4096); }, stream);
    std::printf("cudaGetDevice %.3f us, cudaStreamIsCapturing %.3f us, cudaStreamGetDevice %.3f us, "
                "cudaPointerGetAttributes %.3f us\n",
                get_device, is_capturing, stream_device, pointer_attributes);
    void* entry = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuLaunchKernelEx", &entry, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
        std::printf("cuLaunchKernelEx not found\n");
        return 1;
    }
    const auto driver_launch = reinterpret_cast<LaunchKernelEx>(entry);
    measure_parameter_block_ab(stream);
    measure_two_parameter_ab(stream);
    if (std::getenv("LAUNCH_COST_AB_ONLY")) return 0;  // the two A/Bs only
    for (int pass = 0; pass < 2; ++pass) {
        for (bool dependent : {false, true}) {
            measure_busy_queue<4896>(stream, dependent);  // moegemm's native kernels
            measure_busy_queue<64>(stream, dependent);
        }
        // Where between the two the cost goes (the library's parameters without most of the
        // 4 KB of host sizes would take ~2.4 KB).
        measure_busy_queue<1024>(stream, true);
        measure_busy_queue<2048>(stream, true);
        measure_busy_queue<2560>(stream, true);
        measure_busy_queue<3584>(stream, true);
    }
    measure<64>(stream, driver_launch);
    measure<1024>(stream, driver_launch);
    measure<2048>(stream, driver_launch);
    measure<4864>(stream, driver_launch);
    measure<8192>(stream, driver_launch);
    for (int shared_bytes : {0, 220 * 1024}) {
        measure_gpu<64>(stream, shared_bytes);
        measure_gpu<1024>(stream, shared_bytes);
        measure_gpu<4864>(stream, shared_bytes);
    }
    for (long long spin_ns : {10000ll, 40000ll, 80000ll}) measure_fixed_cost(stream, spin_ns);
    cudaStreamSynchronize(stream);
    cudaFree(buffer);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
