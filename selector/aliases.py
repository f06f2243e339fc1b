"""Op families: names that reach the same kernels, kept as data.

Every name in a group relates to every other (aliases, private implementations, backward
kernels, namespaced spellings, masked and special variants). Anything not listed still
relates to its in-place (`add_`), out (`add.out`, `add_out`), private (`_foo`), backward
(`foo_backward`), `_refs.` and `torch.ops.aten.` spellings by the rules in `selector.opnames`.
Extend per deployment with `PlanConfig.extra_families`.
"""

from __future__ import annotations

FAMILIES: dict[str, tuple[str, ...]] = {
    "softmax": (
        "softmax", "_softmax", "log_softmax", "_log_softmax", "special.softmax",
        "special.log_softmax", "nn.functional.softmax", "nn.functional.log_softmax",
        "softmin", "nn.functional.softmin", "_softmax_backward_data",
        "_log_softmax_backward_data", "masked.softmax", "masked.log_softmax", "masked.softmin",
        "_masked_softmax", "_safe_softmax", "nn.Softmax", "nn.LogSoftmax", "nn.Softmin",
    ),
    "add": ("add", "sub", "subtract", "rsub", "__radd__", "__rsub__", "_foreach_add"),
    "mul": ("mul", "multiply", "__rmul__"),
    "div": ("div", "divide", "true_divide", "floor_divide", "__rdiv__", "__rtruediv__"),
    "abs": ("abs", "absolute"),
    "clamp": ("clamp", "clip", "clamp_min", "clamp_max"),
    "matmul": ("matmul", "mm", "bmm", "addmm", "addbmm", "baddbmm", "mv", "addmv", "dot",
               "vdot", "linalg.matmul", "nn.functional.linear", "nn.Linear", "__rmatmul__"),
    "pow": ("pow", "float_power", "__rpow__"),
    "sum": ("sum", "nansum", "_foreach_sum"),
    "mean": ("mean", "nanmean"),
    "std": ("std", "var", "std_mean", "var_mean"),
    "max": ("max", "amax", "maximum", "fmax"),
    "min": ("min", "amin", "minimum", "fmin"),
    "argmax": ("argmax", "argmin"),
    "cat": ("cat", "concat", "concatenate", "_cat"),
    "gelu": ("gelu", "nn.functional.gelu", "gelu_backward", "nn.GELU"),
    "relu": ("relu", "nn.functional.relu", "threshold", "threshold_backward", "nn.ReLU",
             "nn.functional.relu6", "hardtanh"),
    "silu": ("silu", "nn.functional.silu", "silu_backward", "nn.SiLU"),
    "layer_norm": ("layer_norm", "native_layer_norm", "nn.functional.layer_norm",
                   "native_layer_norm_backward", "nn.LayerNorm"),
    "rms_norm": ("rms_norm", "_fused_rms_norm", "nn.functional.rms_norm", "nn.RMSNorm"),
    "group_norm": ("group_norm", "native_group_norm", "nn.functional.group_norm",
                   "native_group_norm_backward", "nn.GroupNorm"),
    "batch_norm": ("batch_norm", "native_batch_norm", "_native_batch_norm_legit",
                   "nn.functional.batch_norm", "native_batch_norm_backward",
                   "nn.BatchNorm1d", "nn.BatchNorm2d", "nn.BatchNorm3d"),
    "dropout": ("dropout", "native_dropout", "nn.functional.dropout", "nn.Dropout",
                "native_dropout_backward"),
    "embedding": ("embedding", "nn.functional.embedding", "embedding_backward",
                  "embedding_dense_backward", "nn.Embedding"),
    "conv": ("convolution", "_convolution", "conv1d", "conv2d", "conv3d",
             "nn.functional.conv1d", "nn.functional.conv2d", "nn.functional.conv3d",
             "convolution_backward", "nn.Conv1d", "nn.Conv2d", "nn.Conv3d",
             "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"),
    "sdpa": ("scaled_dot_product_attention", "nn.functional.scaled_dot_product_attention",
             "_scaled_dot_product_attention_math", "_scaled_dot_product_flash_attention",
             "_scaled_dot_product_efficient_attention",
             "_scaled_dot_product_flash_attention_for_cpu", "nn.MultiheadAttention"),
    "cross_entropy": ("cross_entropy", "nn.functional.cross_entropy", "nll_loss",
                      "nn.functional.nll_loss", "nll_loss_forward", "nll_loss2d",
                      "nn.CrossEntropyLoss", "nn.NLLLoss"),
    "index": ("index", "index_put", "index_select", "_index_put_impl", "__getitem__",
              "__setitem__"),
    "copy": ("copy", "_copy_from", "_to_copy", "to", "clone", "contiguous"),
    "where": ("where", "masked_fill", "masked_scatter"),
    "exp": ("exp", "exp2", "expm1", "special.exp2", "special.expm1"),
    "log": ("log", "log2", "log10", "log1p", "special.log1p"),
    "sigmoid": ("sigmoid", "special.expit", "nn.functional.sigmoid", "logit", "special.logit",
                "sigmoid_backward", "nn.Sigmoid"),
    "tanh": ("tanh", "nn.functional.tanh", "tanh_backward", "nn.Tanh"),
    "norm": ("norm", "linalg.norm", "linalg.vector_norm", "linalg.matrix_norm", "renorm",
             "nn.functional.normalize"),
    "topk": ("topk", "sort", "argsort", "msort", "kthvalue"),
    "cumsum": ("cumsum", "cumprod", "_cumsum", "logcumsumexp", "cummax", "cummin"),
    "logsumexp": ("logsumexp", "special.logsumexp"),
}


def alias_index(extra: dict[str, tuple[str, ...]] | None = None) -> dict[str, str]:
    """name -> family for every listed name (`extra` groups extend or override)."""
    index: dict[str, str] = {}
    for family, names in {**FAMILIES, **(extra or {})}.items():
        index[family] = family
        for name in names:
            index[name] = family
    return index
