/*
 * libmoegemm's MoE layer in C99: one fused layer on a small Qwen-like shape.
 *
 *   16 experts, top_k 4, hidden H = 512, intermediate I = 256, SwiGLU (w1 holds the gate
 *   rows [0, I) and the up rows [I, 2I)), bf16 weights and activations, T = 37 tokens with
 *   int32 routing ids and fp32 router weights. Tokens are routed to experts 0..11 only, so
 *   experts 12..15 receive no token (legal); a token's choices are distinct experts, as
 *   torch.topk's are.
 *
 *   for every token t and choice j:  e = topk_ids[t, j]
 *       h = silu(x[t] . w1[e][0:I]^T) * (x[t] . w1[e][I:2I]^T)       FC1 + SwiGLU, [I]
 *       y = h . w2[e]^T                                                FC2, [H]
 *   out[t] = sum_j topk_weights[t, j] * y
 *
 * The host reference computes the same in fp32 from the bf16 inputs, rounding h to bf16 as
 * the layer's intermediate is; each output row must match it within 2% (relative to the
 * row's norm: bf16 outputs carry ~0.4% rounding).
 *
 * Exit status: 0 and "OK" on success; 77 when there is no usable GPU (or not an sm_90 one,
 * which the layer needs); 1 on any failure.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <moegemm/moegemm.h>

#define EXIT_SKIP 77

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

enum { E = 16, TOP_K = 4, H = 512, I = 256, T = 37, ROUTED_EXPERTS = 12 };

/* Round to nearest even (finite values only). */
static uint16_t float_to_bf16(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    bits += 0x7FFFu + ((bits >> 16) & 1u);
    return (uint16_t)(bits >> 16);
}

static float bf16_to_float(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* A small LCG: the example needs no randomness of quality, only reproducibility. */
static uint32_t rng_state = 12345u;
static float uniform(void) { /* [-1, 1) */
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)(rng_state >> 8) / 8388608.0f - 1.0f;
}

static float silu(float v) { return v / (1.0f + expf(-v)); }

static uint16_t h_x[T * H];
static uint16_t h_w1[E * 2 * I * H];
static uint16_t h_w2[E * H * I];
static int32_t h_ids[T * TOP_K];
static float h_weights[T * TOP_K];
static uint16_t h_out[T * H];
static float ref[T * H];

int main(void) {
    moegemm_moe_problem_t problem;
    moegemm_moe_tensors_t tensors;
    moegemm_moe_plan_t plan = NULL;
    void *x = NULL, *w1 = NULL, *w2 = NULL, *ids = NULL, *weights = NULL, *out = NULL;
    void *workspace = NULL;
    size_t workspace_bytes = 0;
    cudaStream_t stream = NULL;
    char chosen[MOEGEMM_DESCRIBE_MAX];
    int device_count = 0;
    int exit_code = 1;
    int bad_rows = 0;
    int t, j, e, n, k, i;

    if (moegemm_get_version() != MOEGEMM_VERSION) {
        fprintf(stderr, "libmoegemm %s does not match this header (%d)\n",
                moegemm_get_version_string(), MOEGEMM_VERSION);
        return 1;
    }
    printf("libmoegemm %s\n", moegemm_get_version_string());
    if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
        printf("SKIP: no CUDA device available\n");
        return EXIT_SKIP;
    }

    /* 1. The layer. moegemm_moe_problem_init sets the defaults (bf16, int32 ids, all experts
     *    local, device 0) and the struct's size. */
    MOE_CHECK(moegemm_moe_problem_init(&problem));
    problem.num_experts = E;
    problem.top_k = TOP_K;
    problem.hidden = H;
    problem.intermediate = I;
    problem.max_tokens = 64; /* capacity: any execution's T is at most this */
    problem.activation = MOEGEMM_ACTIVATION_SWIGLU;
    problem.gate_layout = MOEGEMM_GATE_UP_HALVES;
    {
        moegemm_status_t st = moegemm_moe_plan_create(&problem, &plan);
        if (st == MOEGEMM_STATUS_NO_DEVICE || st == MOEGEMM_STATUS_ARCH_MISMATCH ||
            st == MOEGEMM_STATUS_NOT_SUPPORTED) {
            printf("SKIP: %s: %s\n", moegemm_status_name(st), moegemm_get_last_error_message());
            return EXIT_SKIP;
        }
        MOE_CHECK(st);
    }
    MOE_CHECK(moegemm_moe_plan_get_workspace_size(plan, &workspace_bytes));
    MOE_CHECK(moegemm_moe_plan_describe(plan, chosen, sizeof chosen));
    printf("layer: %s\n", chosen);
    printf("workspace: %lu bytes\n", (unsigned long)workspace_bytes);

    /* 2. Random inputs, scaled so that every stage stays near unit magnitude. */
    for (i = 0; i < T * H; ++i)
        h_x[i] = float_to_bf16(uniform());
    for (i = 0; i < E * 2 * I * H; ++i)
        h_w1[i] = float_to_bf16(uniform() * 1.7f / sqrtf((float)H));
    for (i = 0; i < E * H * I; ++i)
        h_w2[i] = float_to_bf16(uniform() * 1.7f / sqrtf((float)I));
    for (t = 0; t < T; ++t) {
        float sum = 0.0f;
        for (j = 0; j < TOP_K; ++j) { /* distinct experts among the first ROUTED_EXPERTS */
            int again;
            do {
                e = (int)((uniform() + 1.0f) * 0.5f * ROUTED_EXPERTS) % ROUTED_EXPERTS;
                again = 0;
                for (k = 0; k < j; ++k)
                    again |= h_ids[t * TOP_K + k] == e;
            } while (again);
            h_ids[t * TOP_K + j] = e;
            h_weights[t * TOP_K + j] = 0.1f + (uniform() + 1.0f);
            sum += h_weights[t * TOP_K + j];
        }
        for (j = 0; j < TOP_K; ++j)
            h_weights[t * TOP_K + j] /= sum;
    }

    /* 3. Device buffers (cudaMalloc: 256-byte aligned) and the execution. */
    CUDA_CHECK(cudaStreamCreate(&stream));
    CUDA_CHECK(cudaMalloc(&x, sizeof h_x));
    CUDA_CHECK(cudaMalloc(&w1, sizeof h_w1));
    CUDA_CHECK(cudaMalloc(&w2, sizeof h_w2));
    CUDA_CHECK(cudaMalloc(&ids, sizeof h_ids));
    CUDA_CHECK(cudaMalloc(&weights, sizeof h_weights));
    CUDA_CHECK(cudaMalloc(&out, sizeof h_out));
    if (workspace_bytes > 0)
        CUDA_CHECK(cudaMalloc(&workspace, workspace_bytes));
    CUDA_CHECK(cudaMemcpyAsync(x, h_x, sizeof h_x, cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaMemcpyAsync(w1, h_w1, sizeof h_w1, cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaMemcpyAsync(w2, h_w2, sizeof h_w2, cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaMemcpyAsync(ids, h_ids, sizeof h_ids, cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaMemcpyAsync(weights, h_weights, sizeof h_weights, cudaMemcpyHostToDevice,
                               stream));

    MOE_CHECK(moegemm_moe_tensors_init(&tensors));
    tensors.x = x;
    tensors.topk_ids = ids;
    tensors.topk_weights = (const float*)weights;
    tensors.w1 = w1;
    tensors.w2 = w2;
    tensors.out = out;
    tensors.num_tokens = T; /* on the host; num_tokens_device for graphs with a varying T */
    MOE_CHECK(moegemm_moe_execute(plan, &tensors, workspace, workspace_bytes, stream));
    CUDA_CHECK(cudaMemcpyAsync(h_out, out, sizeof h_out, cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));

    /* 4. The host reference, unfused, in fp32. */
    memset(ref, 0, sizeof ref);
    for (t = 0; t < T; ++t) {
        for (j = 0; j < TOP_K; ++j) {
            float h_row[I];
            const float w = h_weights[t * TOP_K + j];
            e = h_ids[t * TOP_K + j];
            for (i = 0; i < I; ++i) {
                float gate = 0.0f, up = 0.0f;
                for (k = 0; k < H; ++k) {
                    const float xv = bf16_to_float(h_x[t * H + k]);
                    gate += xv * bf16_to_float(h_w1[((size_t)e * 2 * I + i) * H + k]);
                    up += xv * bf16_to_float(h_w1[((size_t)e * 2 * I + I + i) * H + k]);
                }
                h_row[i] = bf16_to_float(float_to_bf16(silu(gate) * up));
            }
            for (n = 0; n < H; ++n) {
                float y = 0.0f;
                for (i = 0; i < I; ++i)
                    y += h_row[i] * bf16_to_float(h_w2[((size_t)e * H + n) * I + i]);
                ref[t * H + n] += w * y;
            }
        }
    }
    for (t = 0; t < T; ++t) {
        double err = 0.0, norm = 0.0;
        for (n = 0; n < H; ++n) {
            const double d = (double)bf16_to_float(h_out[t * H + n]) - ref[t * H + n];
            err += d * d;
            norm += (double)ref[t * H + n] * ref[t * H + n];
        }
        if (!(sqrt(err) <= 2e-2 * sqrt(norm) + 1e-6)) {
            if (bad_rows++ < 5)
                fprintf(stderr, "row %d: relative error %g\n", t, sqrt(err / (norm + 1e-30)));
        }
    }
    if (bad_rows != 0) {
        fprintf(stderr, "FAIL: %d of %d rows differ from the host reference\n", bad_rows, T);
        goto cleanup;
    }
    printf("out[0, 0:4] = %g %g %g %g (reference %g %g %g %g)\n",
           (double)bf16_to_float(h_out[0]), (double)bf16_to_float(h_out[1]),
           (double)bf16_to_float(h_out[2]), (double)bf16_to_float(h_out[3]), (double)ref[0],
           (double)ref[1], (double)ref[2], (double)ref[3]);
    printf("%d rows match the host reference\n", T);
    printf("OK\n");
    exit_code = 0;

cleanup:
    if (stream != NULL)
        cudaStreamSynchronize(stream);
    if (moegemm_moe_plan_destroy(plan) != MOEGEMM_STATUS_SUCCESS) /* NULL is a no-op */
        exit_code = 1;
    cudaFree(workspace);
    cudaFree(out);
    cudaFree(weights);
    cudaFree(ids);
    cudaFree(w2);
    cudaFree(w1);
    cudaFree(x);
    if (stream != NULL)
        cudaStreamDestroy(stream);
    return exit_code;
}
