"""A whole model inside SGLang 0.5.11's real modules, for the engine-model tests: SGLang's own
Qwen3ForCausalLM (its Qwen3DecoderLayer, LayerCommunicator, RMSNorm, QKV/Row/MergedColumn parallel
linears, vocab-parallel embedding and LM head, rotary embedding) with tiny random weights made here
(no hub), TP = 2 processes over gloo GroupCoordinators as test_integration_sglang.py builds them, the
plugin loaded by SGLang's own load_plugins() and set up by the patched ModelRunner hook.

What is the test's own (named so): the attention kernel behind RadixAttention (StaticKVAttention:
SDPA over a static per-layer KV cache, graph-safe: decode writes and masks by a positions tensor),
the batch object the layers read (fields of ForwardBatch they use), and the logits (the LM head's
shards times the final hidden state, gathered over the group: SGLang's LogitsProcessor needs a full
ForwardBatch). Every CustomOp runs its forward_native (sgl_kernel is not brought).

run_launch(world, ...) is one "launch": prefill of a batch of prompts, then greedy decode steps,
teacher-forced on given tokens when asked (so that plugin-on and plugin-off logits are compared at the
same history); eagerly, and on a GPU also one decode step captured in a CUDA graph and replayed for
every step. Returns per-step logits (fp32) and tokens, the counters and the arfuse lines.
"""
import os
from types import SimpleNamespace

import torch

HIDDEN = 256
LAYERS = 3  # two fused boundaries per inner layer: attention -> MLP and MLP -> next attention
HEADS, KV_HEADS, HEAD_DIM = 4, 2, 64
VOCAB = 512
BATCH, PROMPT = 2, 5
MAX_LEN = 64


class StaticKVAttention:
    """The test's attention backend (RadixAttention calls forward(q, k, v, layer, batch, save_kv_cache)):
    a static cache [layers][batch, MAX_LEN, kv_heads, head_dim]; prefill (all prompts of one length)
    is causal SDPA, decode writes k/v at each row's position and attends to positions <= it."""

    def __init__(self, layers, kv_heads, head_dim, device, dtype):
        shape = (BATCH, MAX_LEN, kv_heads, head_dim)
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(layers)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(layers)]

    def forward(self, q, k, v, layer, batch, save_kv_cache=True, **kwargs):
        lid, h, d = layer.layer_id, layer.tp_q_head_num, layer.head_dim
        kvh = layer.tp_k_head_num
        if batch.forward_mode.is_decode():
            rows = torch.arange(BATCH, device=q.device)
            self.k[lid][rows, batch.positions] = k.view(BATCH, kvh, d)
            self.v[lid][rows, batch.positions] = v.view(BATCH, kvh, d)
            keys = self.k[lid].transpose(1, 2).repeat_interleave(h // kvh, 1)  # [B, H, MAX_LEN, d]
            vals = self.v[lid].transpose(1, 2).repeat_interleave(h // kvh, 1)
            mask = torch.arange(MAX_LEN, device=q.device)[None, :] <= batch.positions[:, None]  # [B, MAX_LEN]
            o = torch.nn.functional.scaled_dot_product_attention(q.view(BATCH, h, 1, d), keys, vals,
                                                                 attn_mask=mask[:, None, None, :],
                                                                 scale=layer.scaling)
            return o.reshape(BATCH, h * d)
        t = q.shape[0] // BATCH
        self.k[lid][:, :t] = k.view(BATCH, t, kvh, d)
        self.v[lid][:, :t] = v.view(BATCH, t, kvh, d)
        keys = k.view(BATCH, t, kvh, d).transpose(1, 2).repeat_interleave(h // kvh, 1)
        vals = v.view(BATCH, t, kvh, d).transpose(1, 2).repeat_interleave(h // kvh, 1)
        o = torch.nn.functional.scaled_dot_product_attention(q.view(BATCH, t, h, d).transpose(1, 2), keys, vals,
                                                             is_causal=True, scale=layer.scaling)
        return o.transpose(1, 2).reshape(BATCH * t, h * d)


def _engine(world, ps, device):
    """SGLang 0.5.11's parallel state for TP = world size (attention TP = TP, no EP, no PP, no DP
    attention) and its global server arguments."""
    from test_integration_sglang import _coordinator

    from sglang.srt.layers import dp_attention
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    n = world.nranks
    tp = _coordinator(ps, [list(range(n))], "tp")
    ones = _coordinator(ps, [[r] for r in range(n)], "ep")
    pp = _coordinator(ps, [[r] for r in range(n)], "pp")
    ps._TP = ps._ATTN_TP = ps._MOE_TP = tp
    ps._MOE_EP, ps._PP = ones, pp
    if hasattr(ps, "_ATTN_CP"):
        ps._ATTN_CP = _coordinator(ps, [[r] for r in range(n)], "attn_cp")
    if hasattr(ps, "_MOE_DP"):
        ps._MOE_DP = _coordinator(ps, [[r] for r in range(n)], "moe_dp")
    # the defaults of every field, without __post_init__ (which would look for the model on a hub)
    import dataclasses

    sa = object.__new__(ServerArgs)
    for f in dataclasses.fields(ServerArgs):
        if f.default is not dataclasses.MISSING:
            setattr(sa, f.name, f.default)
        elif f.default_factory is not dataclasses.MISSING:
            setattr(sa, f.name, f.default_factory())
    sa.model_path, sa.tp_size, sa.device = "arfuse-test-no-model", n, device.split(":")[0]
    set_global_server_args_for_scheduler(sa)
    dp_attention._ENABLE_DP_ATTENTION_FLAG = False
    dp_attention._ATTN_DP_RANK, dp_attention._ATTN_DP_SIZE = 0, 1
    dp_attention._LOCAL_ATTN_DP_RANK, dp_attention._LOCAL_ATTN_DP_SIZE = 0, 1
    return tp


def _config():
    from transformers import Qwen3Config

    return Qwen3Config(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, num_hidden_layers=LAYERS,
                       num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
                       max_position_embeddings=MAX_LEN, rms_norm_eps=1e-6, tie_word_embeddings=False,
                       rope_theta=10000.0)


SHARDED = ("QKVParallelLinear", "RowParallelLinear", "MergedColumnParallelLinear", "VocabParallelEmbedding",
           "ParallelLMHead")


def build_model(rank, device, dtype=torch.bfloat16, seed=5):
    """SGLang's Qwen3ForCausalLM with random weights: a TP shard is drawn from (name, rank), a
    replicated tensor (norms) from its name alone, so the shards form one model and replicas agree."""
    import zlib

    from sglang.srt.models.qwen3 import Qwen3ForCausalLM

    model = Qwen3ForCausalLM(_config()).to(device=device, dtype=dtype).eval()
    owner = {}
    for mname, m in model.named_modules():
        for pname, _ in m.named_parameters(recurse=False):
            owner[f"{mname}.{pname}" if mname else pname] = type(m).__name__
    with torch.no_grad():
        for name, p in model.named_parameters():
            sharded = owner.get(name) in SHARDED
            g = torch.Generator().manual_seed(seed * 1000003 + zlib.crc32(name.encode()) + (rank + 1 if sharded else 0))
            if "norm" in name:
                t = 1.0 + 0.1 * torch.randn(p.shape, generator=g)
            else:
                t = torch.randn(p.shape, generator=g) * (0.5 if "embed" in name else 0.08)
            p.copy_(t.to(dtype))
    for m in model.modules():  # every CustomOp on its native forward (sgl_kernel is not brought)
        if hasattr(m, "forward_native") and hasattr(m, "_forward_method"):
            m._forward_method = m.forward_native
    return model


class Batch(SimpleNamespace):
    """The fields of ForwardBatch the model's layers read here."""


def _batch(mode, input_ids, positions, backend):
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    return Batch(forward_mode=getattr(ForwardMode, mode), input_ids=input_ids, positions=positions,
                 attn_backend=backend, batch_size=BATCH, seq_lens=None, out_cache_loc=None)


def _logits(model, tp, hidden, rows):
    """Logits of `rows` of the final hidden state: the LM head's vocabulary shard on each rank,
    gathered over the group in rank order (fp32, on the CPU)."""
    local = (hidden[rows].float() @ model.lm_head.weight.float().t()).cpu()
    parts = [torch.empty_like(local) for _ in range(tp.world_size)]
    torch.distributed.all_gather(parts, local, group=tp.cpu_group)
    return torch.cat(parts, dim=-1)[:, :VOCAB]


def prompts(seed=9):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (BATCH, PROMPT), generator=g)


def _arfuse_all_reduce(tp):
    """The group's own all-reduce for the CUDA-graph runs: gloo cannot be captured and NCCL refuses two
    ranks on one GPU, so there the engine's unfused all-reduces (embedding, MLP) run arfuse's plain
    all-reduce (arfuse.torch.all_reduce, a communicator of its own), labelled as such in the result."""
    import arfuse.torch as at

    comm = at.from_process_group(tp.cpu_group, None, max_tokens=BATCH * PROMPT, max_hidden=HIDDEN,
                                 dtypes=[torch.bfloat16], fallback=False)
    return lambda x: at.all_reduce(comm, x.contiguous())


def run_launch(world, paths, backend, plugin, steps, forced=None, graphs=False, compile_backend=None):
    """One launch on this rank (see the module docstring). forced: [steps][BATCH] tokens to feed
    instead of the greedy ones (teacher forcing); graphs: the decode step captured once in a CUDA
    graph and replayed for every step; compile_backend: the decode step under torch.compile with
    that backend first (as --enable-torch-compile). Returns a picklable dict."""
    from test_integration_sglang import _prepare, rank_setup

    _prepare(world, paths, backend)
    os.environ["ARFUSE_SGLANG"] = "1" if plugin else "0"
    os.environ["HF_HUB_OFFLINE"] = "1"  # nothing from a hub, ever
    if backend == "fake":
        os.environ["SGLANG_USE_CPU_ENGINE"] = "1"  # SGLang's own switch for its CPU build of the layers
    device, lines = rank_setup(world, backend)
    from arfuse.integrations import _glue

    import sglang.srt.plugins as plugins

    plugins.load_plugins()
    from sglang.srt.distributed import parallel_state as ps

    tp = _engine(world, ps, device)
    if backend == "arfuse":
        # SGLang's JIT-compiled fused QK norm is not brought either: its RMSNorm serves q/k norms
        import sglang.srt.models.utils as model_utils

        model_utils.can_use_fused_inplace_qknorm = lambda *a, **k: False
    if graphs:
        tp.all_reduce = _arfuse_all_reduce(tp)
    model = build_model(world.rank, device)
    from sglang.srt.model_executor.model_runner import ModelRunner

    mr = SimpleNamespace(model_config=SimpleNamespace(hidden_size=HIDDEN), dtype=torch.bfloat16,
                         server_args=SimpleNamespace(cuda_graph_bs=[1, 2, 4, 8],
                                                     enable_flashinfer_allreduce_fusion=False))
    ModelRunner._pre_initialize_flashinfer_allreduce_workspace(mr)  # patched by the plugin when on
    attn = StaticKVAttention(LAYERS, KV_HEADS // tp.world_size, HEAD_DIM, device, torch.bfloat16)
    ids = prompts().to(device)
    out = {"logits": [], "tokens": []}
    with torch.no_grad():
        pos = torch.arange(PROMPT, device=device).repeat(BATCH)
        hidden = model.model(ids.reshape(-1), pos, _batch("EXTEND", ids.reshape(-1), pos, attn))
        last = torch.arange(BATCH, device=device) * PROMPT + PROMPT - 1
        logits = _logits(model, tp, hidden, last)
        step_ids = torch.zeros(BATCH, dtype=torch.long, device=device)
        step_pos = torch.zeros(BATCH, dtype=torch.long, device=device)
        batch = _batch("DECODE", step_ids, step_pos, attn)

        def decode():
            return model.model(step_ids, step_pos, batch)

        if compile_backend:
            # the group's own all-reduce opaque to the compiler, as SGLang keeps it on CUDA (its
            # torch.ops.sglang all-reduce ops); on SGLang's CPU engine dynamo would trace into its
            # shared-memory probe and fail there, which is not what this test is about
            tp.all_reduce = torch._dynamo.disable(tp.all_reduce)
            torch._dynamo.reset()
            decode = torch.compile(decode, backend=compile_backend, dynamic=False)

        graph, graph_out = None, None
        for s in range(steps):
            out["logits"].append(logits)
            tok = logits.argmax(-1)
            out["tokens"].append(tok.tolist())
            nxt = torch.tensor(forced[s]) if forced is not None else tok
            step_ids.copy_(nxt.to(device))
            step_pos.fill_(PROMPT + s)
            if graphs and graph is None:
                decode()  # warm-up outside the graph, then capture (the plugin decides at capture)
                torch.cuda.synchronize()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    graph_out = decode()
            if graph is not None:
                graph.replay()
                hidden = graph_out
            else:
                hidden = decode()
            logits = _logits(model, tp, hidden, torch.arange(BATCH, device=device))
    f = __import__("arfuse.integrations.sglang", fromlist=["fusion"]).fusion()
    out["active"] = bool(f and f.active)
    out["engine_all_reduce"] = "arfuse.torch.all_reduce (graph runs)" if graphs else "gloo"
    out["counters"] = {"/".join(k): v for k, v in _glue.counters().items()}
    out["lines"] = lines
    out["logits"] = [t.tolist() for t in out["logits"]]
    return out
