/* attention_grad.h — the gradients of attention over a sliding window, with soft-capped scores
 * (the backend's attention_window, ABI 4.4), with ALiBi or with gpt-oss's sinks, which the
 * backend's attention_backward (plain causal attention) does not take.  Computed on the host in double, O(T·window·n_heads·hd).
 *
 * Per query t of head h (kv head h / (nh / nkv)), keys j in (t - window, t] (window 0: j <= t):
 *   s_j = (q_t . k_j) / sqrt(hd),  c_j = softcap tanh(s_j / softcap) (softcap 0: c_j = s_j),
 *   p = softmax(c),  out_t = sum_j p_j v_j.
 * For the gradient g = dout_t:  dp_j = g . v_j,  dc_j = p_j (dp_j - sum_i p_i dp_i),
 *   ds_j = dc_j (1 - tanh^2(s_j / softcap)) (or dc_j),  dq_t += ds_j k_j / sqrt(hd),
 *   dk_j += ds_j q_t / sqrt(hd),  dv_j += p_j g. */
#ifndef LMP_CORE_TRAIN_ATTENTION_GRAD_H
#define LMP_CORE_TRAIN_ATTENTION_GRAD_H

#include <stdint.h>

/* q[T, nh*hd], k, v[T, nkv*hd], dout[T, nh*hd] -> dq[T, nh*hd], dk, dv[T, nkv*hd], overwritten.
 * 0, or an LMP_E* error (shapes, memory) with the message set. */
int lmp_attention_window_backward(int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t hd, int64_t window,
                                  float softcap, const float *q, const float *k, const float *v, const float *dout,
                                  float *dq, float *dk, float *dv);

/* The same with ALiBi (model/alibi.h): slopes[n_heads], each score + slopes[h] (j - t); no soft-cap. */
int lmp_attention_alibi_backward(int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t hd, int64_t window,
                                 const float *slopes, const float *q, const float *k, const float *v,
                                 const float *dout, float *dq, float *dk, float *dv);

/* The same with gpt-oss's sinks (sinks[n_heads]: head h's softmax denominator also holds
 * exp(sinks[h]), a logit no value goes with; forward.c attention_sinks); no soft-cap.  dsinks
 * [n_heads] (NULL: not wanted) is added to: dL/dsink_h = -sum_t p_sink(t) sum_j p_j (dout_t . v_j). */
int lmp_attention_sinks_backward(int64_t T, int64_t n_heads, int64_t n_kv_heads, int64_t hd, int64_t window,
                                 const float *sinks, const float *q, const float *k, const float *v,
                                 const float *dout, float *dq, float *dk, float *dv, float *dsinks);

#endif
