"""The words of notebook 06's hints (``HINTS``), by exercise: what the feedback says when an answer
behaves like one of the catalogued mistakes (mistakes.py) or fails a check with a hint of its own
(cases.py, sampling.py).
"""

from __future__ import annotations

__all__ = ["HINTS"]

HINTS = {
    # KVCache
    "cat_axis": "append along the sequence axis: torch.cat((self.k, k), dim=2) for (B, G, S, Dh) "
                "tensors (dim=1 is the heads)",
    "seq_len_heads": "seq_len is the number of cached positions, k.size(2) (or k.shape[-2]) of the "
                     "(B, G, S, Dh) cache, not the heads",
    "seq_len_updates": "seq_len counts positions, not update calls: a prefill of T tokens adds T",
    "return_new": "update returns the whole cache (B, G, P + T, Dh), old and new positions, not only "
                  "the k, v it was given",
    "return_old": "update appends first, then returns the cache including the new positions",
    "kv_swapped": "keep keys and values apart: self.k grows with k, self.v with v",
    "cache_validate": "update raises ValueError itself when k and v differ in shape, or when B, G, Dh "
                      "or the dtype differ from the cache (torch.cat would raise another error, or "
                      "silently promote the dtype)",
    "seq_len_method": "make seq_len a property (@property above def seq_len): it is read as "
                      "cache.seq_len, without parentheses",
    # CausalSelfAttention
    "positions_offset": "with a cache the new tokens sit at absolute positions P .. P + T - 1 "
                        "(P = cache.seq_len before update): rope_cos_sin(torch.arange(P, P + T), ...)",
    "pre_rope_cache": "rotate k before cache.update: the cache holds keys after RoPE (each key "
                      "rotated once, at its own position)",
    "top_left": "with a cache the causal mask is bottom-right: query i sees keys j <= P + i; "
                "F.scaled_dot_product_attention(is_causal=True) is top-left when T != S: pass "
                "causal_mask(T, S) as the mask instead",
    "no_mask": "mask the future: causal_mask(T, S) (True = may attend), else each token sees later ones",
    "scale_d": "scale the scores by 1/sqrt(head_dim), the per-head width, not 1/sqrt(d_model)",
    "rope_v": "RoPE rotates q and k only, never v",
    "interleaved": "the course's RoPE pairs dims i and i + Dh/2 (rotate-half): use rope_cos_sin and "
                   "apply_rope from the setup, not the interleaved (2i, 2i+1) pairing",
    "theta": "pass rope_theta on as the RoPE base: rope_cos_sin(positions, head_dim, self.rope_theta)",
    "no_o_proj": "finish with o_proj: merge the heads to (B, T, D), then self.o_proj(...)",
    "split_view": "split the heads with view(B, T, H, Dh).transpose(1, 2): head h owns the columns "
                  "h·Dh .. (h+1)·Dh - 1 of q_proj(x); view(B, T, Dh, H) gives it every H-th column",
    "merge_view": "merge the heads with out.transpose(1, 2).reshape(B, T, D): (B, H, T, Dh) -> "
                  "(B, T, H, Dh) first, then flatten the last two",
    "divisible": "raise ValueError in __init__ when d_model % num_heads != 0",
    "no_rope": "rotate q and k with RoPE (apply_rope with the tables of rope_cos_sin) before the scores",
    # DecoderBlock
    "residual_normed": "the residual stream carries x itself: h = x + attn(attn_norm(x), cache), not "
                       "attn_norm(x) + ...",
    "residual_normed_both": "both residuals carry the stream itself: h = x + attn(attn_norm(x), cache), "
                            "then h + ffn(ffn_norm(h)); overwriting x (or h) with its normalised value "
                            "drops the residual of both sublayers",
    "post_norm": "pre-norm: normalise the sublayer's input, h = x + attn(attn_norm(x), cache); "
                 "attn_norm(x + attn(x)) is post-norm",
    "block_cache": "pass the cache on to the attention: self.attn(self.attn_norm(x), cache)",
    "ffn_residual_x": "the second residual adds to h: return h + ffn(ffn_norm(h)); x + ... drops the "
                      "attention's output",
    "ffn_input_x": "the FFN reads the updated stream h: h + ffn(ffn_norm(h)), not ffn_norm(x)",
    "eps": "pass eps on to both RMSNorms: RMSNorm(d_model, eps)",
    "attn_unnormed": "pre-norm normalises the input of both sublayers: h = x + attn(attn_norm(x), cache), "
                     "then h + ffn(ffn_norm(h))",
    "block_theta": "pass rope_theta on to CausalSelfAttention(d_model, num_heads, rope_theta)",
    # DecoderLM
    "final_norm": "apply final_norm to the last block's output before lm_head",
    "tie": "tie_embeddings=True: make lm_head.weight the same Parameter as tok_emb.weight "
           "(self.lm_head.weight = self.tok_emb.weight), not a copy of its values",
    "always_tied": "tie lm_head to tok_emb only when tie_embeddings=True; otherwise lm_head has its "
                   "own weight",
    "lm_caches": "give block i its own cache: block(x, caches[i]) (None when caches is None)",
    "lm_shared_cache": "block i uses caches[i]: one cache per block, never one for all",
    "caches_len": "raise ValueError when len(caches) != len(self.blocks): one cache per block",
    "emb_scale": "the token embedding goes in as it is: no * sqrt(d_model) (that is Gemma's and the "
                 "original Transformer's scaling, not Llama's)",
    "lm_theta": "pass rope_theta on to every block: DecoderBlock(d_model, num_heads, d_ff, rope_theta)",
    "lm_softmax": "return the logits (lm_head's output), not probabilities: no softmax in forward",
    # sample_next_token
    "zero_temp": "temperature 0 means greedy: return logits.argmax(-1) before dividing by the "
                 "temperature (logits / 0 gives inf and NaN)",
    "temp_after": "divide the logits by the temperature before the softmax: softmax(logits) / T is "
                  "normalised away by the sampling, so the temperature has no effect",
    "temp_multiply": "divide by the temperature: logits / T (T < 1 sharpens, T > 1 flattens)",
    "temp_late": "divide by the temperature before top-k/top-p: the nucleus is taken from "
                 "softmax(logits / T), so T changes which tokens top-p keeps",
    "topk_extra": "top-k keeps exactly the k largest logits: mask every logit below the k-th largest "
                  "(torch.topk(logits, k).values[..., -1:]), not below the (k+1)-th",
    "topk_short": "top-k keeps the k largest logits, the k-th included (mask with < kth, not <= kth)",
    "topp_drop": "top-p keeps the token that crosses p: keep each token whose preceding cumulative "
                 "mass (cumsum - p_i) is below p, so the smallest set whose mass reaches p stays",
    "topp_extra": "top-p keeps the smallest set whose mass reaches p: drop a token once the mass "
                  "ranked above it is already >= p",
    "topp_first": "apply top-k first, then top-p on the softmax of what top-k kept (Hugging Face's "
                  "order): the nucleus is taken after top-k renormalised",
    "topp_gather": "undo the sort with scatter: torch.empty_like(s).scatter(-1, order, sorted_s); "
                   "sorted_s.gather(-1, order) applies the permutation again instead of undoing it",
    "topp_unsorted": "top-p sorts the probabilities in descending order before the cumulative sum",
    "no_generator": "pass generator=generator to torch.multinomial (or your sampler): the same "
                    "generator state must give the same tokens",
    "tokens_shape": "return one token per row, shape (B,): torch.multinomial(probs, 1) is (B, 1), "
                    "so .squeeze(-1) it",
    "sample_errors": "raise ValueError for temperature < 0, top_k < 1 and top_p outside (0, 1]",
    # generate
    "whole_into_cache": "with a cache, feed only the new token after the prefill: model(next_token[:, "
                        "None], caches=caches); the whole sequence again adds it to the cache twice",
    "shared_caches": "one KVCache per block: [KVCache() for _ in model.blocks]; [KVCache()] * L "
                     "puts the same cache in every block",
    "fresh_caches": "create the caches once, before the loop: new caches at every step forget the "
                    "prompt and the tokens so far",
    "no_advance": "feed the token just generated at each step (after the prefill), not the prompt's "
                  "last token again",
    "ignores_cache": "use_cache=True: prefill the prompt once with caches, then one token per call; "
                     "the model must not see the whole sequence again",
    "first_row": "the next token comes from the last position's logits: logits[:, -1]",
    "gen_options": "pass temperature, top_k, top_p and generator on to sample_next_token",
    "gen_wrong_greedy": "the filtered runs give your own greedy tokens, so the options do reach "
                        "sample_next_token; the greedy continuation itself is off: see the core check (create "
                        "the caches once, before the loop; feed the new token after the prefill)",
    "always_greedy": "sample with sample_next_token(logits[:, -1], temperature, top_k, top_p, "
                     "generator): argmax only when temperature == 0",
    "no_grad": "run the loop under torch.no_grad() (or torch.inference_mode()): generation needs no "
               "autograd graph",
    "gen_uncached_caches": "use_cache=False: call the model with the whole sequence and caches=None",
    # kv_cache_bytes
    "kv_both": "count K and V: 2 · L · G · Dh · S · B · bytes_per_element",
    "bits": "bytes_per_element is already in bytes: no factor 8",
    "batch": "multiply by batch_size: every sequence of the batch has its own cache",
    "int": "return a Python int (int(...)): a byte count is exact, not a float",
    "kv_negative": "raise ValueError when any argument is negative (0 is allowed)",
    # apply_repetition_penalty
    "rp_negative": "a negative logit is multiplied by the penalty (made more negative); dividing it "
                   "would raise the token's probability",
    "rp_repeats": "each id counts once, however often it repeats in input_ids: gather, penalise, "
                  "scatter (or mark the seen ids), don't apply the penalty per occurrence",
    "rp_all": "penalise only the ids that occur in input_ids[b], each row with its own ids",
    "rp_inverted": "a positive logit is divided by the penalty (penalty > 1 lowers it)",
    "rp_penalty_error": "raise ValueError for penalty <= 0",
}
