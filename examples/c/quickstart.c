/*
 * libmoegemm quick start in C99: one grouped GEMM in the VARIABLE layout.
 *
 *   4 experts, N = 64, K = 64, bf16 in and out, B in the nn.Linear layout [E, N, K].
 *   Rows per expert (host memory): {5, 0, 9, 3}. Expert 1 receives no token: legal.
 *
 *   A [MAX_ROWS, K] holds the tokens sorted by expert: expert e owns rows
 *   [off_e, off_e + M_e) with off_e = M_0 + ... + M_{e-1}. D [MAX_ROWS, N] gets
 *   D[row, n] = sum_k A[row, k] * B[e, n, k] for the valid rows, and rows past the sum
 *   (here 17..31) are left untouched.
 *
 * The inputs are small integers, so every product and every sum is exact in bf16 and the
 * result is compared with a host reference for equality.
 *
 * Exit status: 0 and "PASS" on success; 77 when there is no usable GPU; 1 on any failure.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <moegemm/moegemm.h>

#define EXIT_SKIP 77

/* On failure: print the call, the status name and the thread-local detail, then clean up. */
#define MOE_CHECK(call)                                                          \
    do {                                                                         \
        moegemm_status_t st_ = (call);                                           \
        if (st_ != MOEGEMM_STATUS_SUCCESS) {                                     \
            fprintf(stderr, "%s: %s: %s\n", #call, moegemm_status_name(st_),     \
                    moegemm_get_last_error_message());                           \
            goto cleanup;                                                        \
        }                                                                        \
    } while (0)

#define CUDA_CHECK(call)                                                         \
    do {                                                                         \
        cudaError_t err_ = (call);                                               \
        if (err_ != cudaSuccess) {                                               \
            fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(err_));        \
            goto cleanup;                                                        \
        }                                                                        \
    } while (0)

enum { E = 4, N = 64, K = 64, MAX_ROWS = 32 };

/* bf16 is the upper half of an IEEE float; for the small integers used here the conversion
 * is exact in both directions (no rounding needed). */
static uint16_t float_to_bf16(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return (uint16_t)(bits >> 16);
}

static float bf16_to_float(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Inputs: A in {-1, 0, 1}, B in {-2, ..., 2}; |D| <= 2 * K = 128, exact in bf16. */
static float a_value(int row, int k) { return (float)((row * 7 + k * 3) % 3 - 1); }
static float b_value(int e, int n, int k) { return (float)((e * 5 + n * 3 + k) % 5 - 2); }

/* D rows never written keep this pattern (0xFFFF is a bf16 NaN). */
#define SENTINEL 0xFFFFu

static uint16_t h_a[MAX_ROWS * K];
static uint16_t h_b[E * N * K];
static uint16_t h_d[MAX_ROWS * N];

int main(void) {
    /* Rows routed to each expert. Expert 1 is empty; the sum, 17, is below MAX_ROWS. */
    const int32_t rows[E] = {5, 0, 9, 3};
    moegemm_problem_t problem;
    moegemm_plan_t plan = NULL;
    void *a = NULL, *b = NULL, *d = NULL, *workspace = NULL;
    size_t workspace_bytes = 0;
    cudaStream_t stream = NULL;
    char chosen[MOEGEMM_DESCRIBE_MAX];
    int device_count = 0;
    int exit_code = 1;
    int total_rows = 0;
    int mismatches = 0;
    int e, r, n, k;

    /* The header this program was compiled with must match the library it runs with. */
    if (moegemm_get_version() != MOEGEMM_VERSION) {
        fprintf(stderr, "libmoegemm %s does not match this header (%d)\n",
                moegemm_get_version_string(), MOEGEMM_VERSION);
        return 1;
    }
    printf("libmoegemm %s\n", moegemm_get_version_string());

    /* No GPU (or no driver): nothing to run. */
    if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
        printf("SKIP: no CUDA device available\n");
        return EXIT_SKIP;
    }

    /* 1. Describe the problem. moegemm_problem_init sets the defaults (bf16 everywhere,
     *    WEIGHTS_NK, backend AUTO, device 0) and the struct's size. */
    MOE_CHECK(moegemm_problem_init(&problem));
    problem.layout = MOEGEMM_LAYOUT_VARIABLE;
    problem.num_experts = E;
    problem.n = N;
    problem.k = K;
    problem.max_rows = MAX_ROWS; /* capacity of A and D, in rows */

    /* 2. Create the plan. Without a usable GPU this is where the library says so. */
    {
        moegemm_status_t st = moegemm_plan_create(&problem, &plan);
        if (st == MOEGEMM_STATUS_NO_DEVICE || st == MOEGEMM_STATUS_ARCH_MISMATCH) {
            printf("SKIP: %s: %s\n", moegemm_status_name(st), moegemm_get_last_error_message());
            return EXIT_SKIP;
        }
        MOE_CHECK(st);
    }

    /* 3. Give it the rows per expert, from host memory: copied and validated now. */
    MOE_CHECK(moegemm_plan_set_expert_sizes(plan, rows, MOEGEMM_MEMORY_HOST));
    MOE_CHECK(moegemm_plan_get_workspace_size(plan, &workspace_bytes));
    MOE_CHECK(moegemm_plan_describe(plan, chosen, sizeof chosen));
    printf("plan: %s\n", chosen);
    printf("workspace: %lu bytes\n", (unsigned long)workspace_bytes);

    /* 4. Host inputs. */
    for (r = 0; r < MAX_ROWS; ++r)
        for (k = 0; k < K; ++k)
            h_a[r * K + k] = float_to_bf16(a_value(r, k));
    for (e = 0; e < E; ++e)
        for (n = 0; n < N; ++n)
            for (k = 0; k < K; ++k)
                h_b[(e * N + n) * K + k] = float_to_bf16(b_value(e, n, k));

    /* 5. Device buffers. cudaMalloc memory is 256-byte aligned: enough for the tensors
     *    (16 bytes) and the workspace (256 bytes). */
    CUDA_CHECK(cudaStreamCreate(&stream));
    CUDA_CHECK(cudaMalloc(&a, sizeof h_a));
    CUDA_CHECK(cudaMalloc(&b, sizeof h_b));
    CUDA_CHECK(cudaMalloc(&d, sizeof h_d));
    if (workspace_bytes > 0)
        CUDA_CHECK(cudaMalloc(&workspace, workspace_bytes));
    CUDA_CHECK(cudaMemcpyAsync(a, h_a, sizeof h_a, cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaMemcpyAsync(b, h_b, sizeof h_b, cudaMemcpyHostToDevice, stream));
    /* Fill D with a sentinel to show that rows past the sum of sizes stay untouched. */
    CUDA_CHECK(cudaMemsetAsync(d, 0xFF, sizeof h_d, stream));

    /* 6. Execute: enqueued on the stream, returns at once. */
    MOE_CHECK(moegemm_execute(plan, a, b, d, NULL, NULL, workspace, workspace_bytes, stream));
    CUDA_CHECK(cudaMemcpyAsync(h_d, d, sizeof h_d, cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream)); /* kernel faults would surface here */

    /* 7. Compare with the host reference, expert by expert. */
    for (e = 0; e < E; ++e) {
        for (r = 0; r < rows[e]; ++r) {
            const int row = total_rows + r; /* off_e + r */
            for (n = 0; n < N; ++n) {
                float expected = 0.0f;
                float got = bf16_to_float(h_d[row * N + n]);
                for (k = 0; k < K; ++k)
                    expected += a_value(row, k) * b_value(e, n, k);
                if (got != expected && mismatches++ < 10)
                    fprintf(stderr, "mismatch: expert %d row %d col %d: got %g, expected %g\n",
                            e, row, n, (double)got, (double)expected);
            }
        }
        total_rows += rows[e];
    }
    for (r = total_rows; r < MAX_ROWS; ++r)
        for (n = 0; n < N; ++n)
            if (h_d[r * N + n] != SENTINEL && mismatches++ < 10)
                fprintf(stderr, "row %d past the sum of sizes was written\n", r);

    if (mismatches != 0) {
        fprintf(stderr, "FAIL: %d mismatching elements\n", mismatches);
        goto cleanup;
    }
    printf("D rows [0, %d) match the host reference; rows [%d, %d) untouched\n", total_rows,
           total_rows, MAX_ROWS);
    printf("PASS\n");
    exit_code = 0;

cleanup:
    /* No execution may be pending on a plan being destroyed, or on memory being freed. */
    if (stream != NULL)
        cudaStreamSynchronize(stream);
    if (moegemm_plan_destroy(plan) != MOEGEMM_STATUS_SUCCESS) /* NULL is a no-op */
        exit_code = 1;
    cudaFree(workspace);
    cudaFree(d);
    cudaFree(b);
    cudaFree(a);
    if (stream != NULL)
        cudaStreamDestroy(stream);
    return exit_code;
}
