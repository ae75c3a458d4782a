"""The words of notebook 05's hints (``HINTS``), by exercise: what the feedback says when an answer
behaves like one of the catalogued mistakes (mistakes.py) or fails a check with a hint of its own
(cases.py, routing.py).
"""

from __future__ import annotations

__all__ = ["HINTS"]

HINTS = {
    # gelu
    "tanh_for_exact": 'approximate="none" is the exact form 0.5·x·(1 + erf(x/√2)): the tanh formula is '
                      'the approximation, used only when approximate="tanh"',
    "erf_for_tanh": 'approximate="tanh" asks for the tanh approximation 0.5·x·(1 + tanh(√(2/π)·(x + '
                    '0.044715·x³))), not the exact erf form',
    "no_sqrt2": "Φ(x) = 0.5·(1 + erf(x/√2)): divide x by √2 inside erf (math.sqrt(2.0))",
    "no_half": "Φ(x) = 0.5·(1 + erf(x/√2)): the 0.5 belongs to the normal CDF, so GELU(x) = 0.5·x·(1 + ...)",
    "quick_gelu": "x·σ(1.702·x) is a cheaper approximation (\"quick GELU\"); the exercise asks for the "
                  "exact erf form and Hendrycks & Gimpel's tanh form",
    "silu_not_gelu": "x·σ(x) is SiLU (Swish), not GELU: GELU(x) = x·Φ(x) = 0.5·x·(1 + erf(x/√2))",
    "no_cube": "the tanh form has a cubic term: tanh(√(2/π)·(x + 0.044715·x³))",
    "tanh_constant": "the constant inside tanh is √(2/π) = math.sqrt(2.0 / math.pi) ≈ 0.798, multiplying "
                     "(x + 0.044715·x³)",
    "float64_down": "upcast half precision only: .float() turns float64 input into float32; keep float64 as "
                    "it is (h = x.to(torch.promote_types(x.dtype, torch.float32)))",
    "float32_inside": "float64 in, float64 all the way: this is off by float32 rounding (~1e-7), so part of it "
                      "ran in float32 (.float(), dtype=torch.float32): upcast half precision only, "
                      "h = x.to(torch.promote_types(x.dtype, torch.float32))",
    "float32_out": "you computed in float32: cast the result back with .to(x.dtype) before returning",
    "cast_back": "a float32 softmax is fine, a float32 result is not: cast it back to the dtype of {what} "
                 "(.to({what}.dtype)) before returning",
    "approximate_error": 'raise ValueError when approximate is neither "none" nor "tanh" (an unknown value '
                         "must not silently pick a form)",
    # FeedForward
    "ff_tanh": 'FeedForward uses the exact GELU: gelu(h) with the default approximate="none" (or F.gelu(h)), '
               "not the tanh form",
    "ff_relu": "the activation is GELU, not ReLU: down_proj(gelu(up_proj(x)))",
    "ff_silu": "the activation is GELU, not SiLU: down_proj(gelu(up_proj(x)))",
    "ff_no_act": "apply GELU between the two layers: without it the FFN is one linear map",
    "ff_act_after": "GELU goes between the layers, on up_proj's output: down_proj(gelu(up_proj(x))), not "
                    "gelu(down_proj(up_proj(x)))",
    "ff_act_both": "GELU once, between the layers: down_proj(gelu(up_proj(x))); nothing after down_proj",
    # SwiGLU
    "glu_sigmoid": "SwiGLU gates with SiLU (Swish), z·σ(z) = F.silu(z): σ(gate_proj(x)) alone is GLU, a "
                   "different unit",
    "silu_after": "SiLU goes on the gate branch before the product: silu(gate_proj(x)) * up_proj(x), not "
                  "silu(gate_proj(x) * up_proj(x))",
    "gate_up_swapped": "the SiLU goes on gate_proj's output; up_proj's stays linear: "
                       "silu(gate_proj(x)) * up_proj(x)",
    "geglu": "GELU on the gate is GeGLU (Gemma): SwiGLU uses SiLU, F.silu(gate_proj(x))",
    "bilinear": "apply SiLU to the gate branch: silu(gate_proj(x)) * up_proj(x); without it the unit is "
                "bilinear",
    "silu_both": "only the gate branch goes through SiLU: silu(gate_proj(x)) * up_proj(x)",
    # swiglu_hidden_dim
    "round_down": "round UP to a multiple of multiple_of: multiple_of * ((hidden + multiple_of - 1) // "
                  "multiple_of); // alone rounds down (and round() to the nearest)",
    "multiplier_after": "apply ffn_dim_multiplier before rounding: hidden = int(ffn_dim_multiplier * hidden), "
                        "then round up (Llama-3-8B: 14336)",
    "no_two_thirds": "start from two thirds of 4·D: hidden = int(2 * 4 * d_model / 3) (the third matrix is "
                     "paid for with a narrower width)",
    "no_four": "the width starts from the GELU MLP's 4·D: int(2 * 4 * d_model / 3), not two thirds of D",
    "multiple_ignored": "round up to a multiple of the multiple_of you are given, not a fixed 256",
    "multiplier_ignored": "when ffn_dim_multiplier is given, hidden = int(ffn_dim_multiplier * hidden) "
                          "before rounding",
    "python_int": "return a Python int: integer arithmetic (//) keeps it an int; math.ceil gives an int too, "
                  "but a float (/), numpy or torch value does not (int(...) converts)",
    "hidden_error": "raise ValueError when d_model or multiple_of is not a positive int "
                    "(isinstance(v, int) and v > 0)",
    # MoE
    "no_renorm": "renormalise the K kept weights so they sum to 1: weights / weights.sum(-1, keepdim=True) "
                 "(Mixtral); the raw softmax values of the top K sum to less than 1",
    "smallest": "top-K means the K largest probabilities: torch.topk(probs, K, dim=-1) (largest=True is "
                "the default)",
    "softmax_tokens": "softmax over the E experts of each token (dim=-1 of the (N, E) logits), not over the "
                      "tokens",
    "logits_btE": "return router_logits as (N, E) with N = B·T: compute the gate on x.reshape(-1, D) (or "
                  "reshape its output), as Hugging Face's Mixtral does",
    "dense": "call each expert only on the tokens routed to it: token, slot = torch.where(expert_index == e), "
             "then expert(h[token]); running every expert on every token does E/K times the work",
    "no_softmax": "the weights come from the softmax over the E experts: probs = softmax(router_logits, "
                  "dim=-1), then top-K of probs and renormalise",
    "unweighted": "scale each expert's output by its routing weight before adding: "
                  "expert(h[token]) * weights[token, slot, None]",
    "expert_parts": "call each expert module itself, expert(h[token]): the checks' experts are probes whose "
                    "forward is not the SwiGLU of their three projections (calling gate_proj/up_proj directly "
                    "bypasses it)",
    "moe_top_k": "raise ValueError unless 1 <= top_k <= num_experts",
    "extra_rows": "call each expert only on the tokens routed to it, expert(h[token]): the checks' experts "
                  "return NaN for a whole call that holds any other token, so every expert on every token, then "
                  "a zero weight, torch.where or a second call, gives NaN",
    "router_detached": "the router learns through y: do not .detach() router_logits or the probabilities "
                       "(nor route under torch.no_grad()); the gradient reaches gate.weight through the K "
                       "routing weights",
    "router_gradient": "y is right but gate.weight's gradient is not: the K weights must be the renormalised "
                       "softmax probabilities as tensors of the graph (no .detach(), .item() or rebuilt "
                       "tensors in the routing weights)",
    "topk_tokens": "top-K per token is over the experts: probs.topk(top_k, dim=-1) on the (N, E) "
                   "probabilities, not dim=0 (that picks tokens for each expert)",
    # load_balancing_loss
    "no_E": "multiply by the number of experts E: loss = E · Σ_e f_e · P_e, so that perfectly balanced "
            "routing gives 1.0",
    "hf_norm": "divide the counts by N·K assignments, not by N tokens: Hugging Face's load_balancing_loss_func "
               "divides by N, so balanced routing gives K there; here it must give 1.0",
    "soft_f": "f_e counts the top-K assignments to expert e (a count, via bincount or one_hot), not the "
              "mean probability: E · Σ P_e² is another quantity",
    "top1_f": "count all K slots of each token's top-K (topk(probs, top_k).indices), not only the first",
    "P_logits": "P_e is the mean router probability: the softmax over experts, averaged over the tokens, "
                "not the mean of the logits",
    "P_tokens": "the probabilities come from a softmax over the E experts of each token (dim=-1), then the "
                "mean over tokens (dim=0)",
    "per_expert": "return one number: the sum over experts, E · (f * P).sum(), a 0-dim tensor",
    "f_gradient": "f is a count and carries no gradient (bincount or one_hot of the top-K indices): the "
                  "gradient reaches router_logits through P only, so the loss pushes down the probability "
                  "of busy experts, not their counts",
    "no_graph": "compute the loss with tensor operations on router_logits (softmax, mean, sum): .item(), "
                ".tolist() or torch.tensor(number) cut the graph, and training gets no gradient from it",
    "P_kept": "P_e is the mean of ALL N tokens' probabilities for expert e (probs.mean(dim=0)), not only of "
              "the probabilities kept in the top K",
    "topk_tokens_loss": "the top K of each token is over the experts: probs.topk(top_k, dim=-1), not dim=0 "
                        "(that picks K tokens per expert)",
    # route_with_capacity
    "token_major": "offer the assignments slot by slot: slot 0 of every token (in token order) first, then "
                   "slot 1, ...: expert_index.T.reshape(-1), not expert_index.reshape(-1)",
    "off_by_one": "an expert accepts the first `capacity` assignments: keep position <= capacity with "
                  "1-based positions (or < capacity with 0-based ones)",
    "renorm_after": "dropping does not change the weights: return the top-K weights renormalised over the K "
                    "(not zeroed, not renormalised again over the kept slots); kept says which slots are dropped",
    "bool_mask": "kept is a bool tensor: return the comparison itself (position <= capacity), without "
                 ".long() or .float()",
    "ascending": "list each token's K experts in descending probability (torch.topk's order)",
    "capacity_error": "raise ValueError when capacity < 0",
}
