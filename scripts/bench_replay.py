"""Does compile() replay real models' steps, and how fast are they against PyTorch CPU?

    python scripts/bench_replay.py                    # every row (about 5 minutes)
    python scripts/bench_replay.py --zoo              # the zoo's models only
    python scripts/bench_replay.py --hf               # the Hugging Face rows only
    python scripts/bench_replay.py bert distilbert    # some rows

Rows: every zoo model (scripts/zoo, small size) as an inference step and an SGD training
step, and Hugging Face models nobody tuned the runtime for, built from small random
configs (no downloads): DistilBERT (sequence classification with labels: `nn.ReLU()(x)`
in its head and a loss module built in forward), RoBERTa, BART (with labels), Whisper,
Mistral with a sliding window, and Mistral's `generate()` with a static cache (eight new
tokens per call), compiled two ways: the model's forward (`mistral-generate`, as Hugging
Face compiles generation) and the whole `generate()` call (`mistral-generate-call`); and
GPT-2's and T5's `generate()` calls compiled whole, with the default dynamic cache.

For each row: how many timed calls of `compile(step)` replayed, and the median over turns
of its time over PyTorch CPU eager's, measured in the same turn; next to it the same
step traced on every call (`compile(step, replay=False)`), which is what a step that
does not replay costs. Turns alternate the three in a fixed order; each function's time
in a turn is its median call, and the ratios are medians over turns of the per-turn
ratios: on a shared machine a call now and then waits 100 ms or more for a core, and
absolute times move from turn to turn. The load average is printed with the results.
PyTorch runs on one thread unless --torch-threads says otherwise: these steps are too
small for its two OpenMP threads to help, and on a loaded 2-core machine they wait on
each other for a core (the same DistilBERT step took a median 0.7 ms or 300 ms in runs a
minute apart), which would flatter every ratio here.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import torch

import xla_native_functions as xnf
from xla_native_functions.runtime.platform.metrics import metrics

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_model import _tensors, zoo_step  # noqa: E402
from zoo import MODELS, SIZES  # noqa: E402

TURNS = 7
TURN_SECONDS = 0.1
WARMUP = 6
VOCAB = 64


def _sync(out: Any) -> Any:
    """The step's tensors on the host, so a timing includes the work (PyTorch's are there)."""
    return [xnf.to_torch(t) for t in _tensors(out)]


def _calls_per_turn(fn: Callable) -> int:
    start = time.perf_counter()
    fn()
    return max(2, min(200, int(TURN_SECONDS / max(time.perf_counter() - start, 1e-6))))


def measure(ref: Callable, replayed: Callable, traced: Callable, replay_counter: Callable[[], int]) -> dict:
    """Median per-turn ratios of `replayed` and `traced` over `ref`, and how many timed
    calls of `replayed` were replays."""
    for _ in range(WARMUP):
        ref(), replayed(), traced()
    n = _calls_per_turn(ref)
    n_ours = _calls_per_turn(replayed)
    n_traced = _calls_per_turn(traced)
    before, calls = replay_counter(), 0
    ratios: dict[str, list[float]] = {"replayed": [], "traced": []}
    ref_ms = []
    for _ in range(TURNS):
        times = {}
        for name, fn, k in (("ref", ref, n), ("replayed", replayed, n_ours), ("traced", traced, n_traced)):
            fn()  # untimed: PyTorch's idle OpenMP workers and cold caches slow the first call of a turn
            each = []
            for _ in range(k):
                start = time.perf_counter()
                fn()
                each.append(time.perf_counter() - start)
            # the median call: on a loaded machine a call now and then waits 100+ ms for a core
            times[name] = statistics.median(each)
            if name == "replayed":
                calls += k + 1
        ref_ms.append(times["ref"] * 1e3)
        for name in ratios:
            ratios[name].append(times[name] / times["ref"])
    return {"replayed_calls": f"{replay_counter() - before}/{calls}", "torch_ms": statistics.median(ref_ms),
            "replayed": statistics.median(ratios["replayed"]), "traced": statistics.median(ratios["traced"])}


# ---------------------------------------------------------------- rows


def zoo_row(name: str, task: str) -> tuple[Callable, Callable, Callable]:
    """PyTorch's step, ours (uncompiled) and a second copy of ours for the traced column."""
    spec = MODELS[name]
    size = SIZES["small"]
    torch.manual_seed(0)
    case = spec.build(size.batch, size=size)
    train = task != "inference"
    case.model.train(train)
    ref_in = (case.inputs, case.kwargs or {}, case.target)
    steps = [zoo_step(case, case.model, ref_in, task)]
    for _ in range(2):
        model = xnf.to_xla(copy.deepcopy(case.model))
        steps.append(zoo_step(case, model, xnf.to_xla(ref_in), task, capturable=True))
    return steps[0], steps[1], steps[2]


def _hf_models() -> dict[str, Callable[[], tuple[torch.nn.Module, dict, Callable]]]:
    import transformers as tr

    def ids(batch=2, seq=8, low=3):
        return torch.randint(low, VOCAB, (batch, seq))

    def logits_and_loss(out):
        return (out.logits,) if getattr(out, "loss", None) is None else (out.logits, out.loss)

    def distilbert():
        config = tr.DistilBertConfig(vocab_size=VOCAB, dim=16, n_layers=2, n_heads=2, hidden_dim=32,
                                     max_position_embeddings=32, dropout=0.0, attention_dropout=0.0,
                                     seq_classif_dropout=0.0, num_labels=3)
        return tr.DistilBertForSequenceClassification(config), {"input_ids": ids(), "labels": torch.tensor([0, 2])}

    def roberta():
        config = tr.RobertaConfig(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=32, max_position_embeddings=40, hidden_dropout_prob=0.0,
                                  attention_probs_dropout_prob=0.0)
        return tr.RobertaForMaskedLM(config), {"input_ids": ids()}

    def bart():
        config = tr.BartConfig(vocab_size=VOCAB, d_model=16, encoder_layers=2, decoder_layers=2,
                               encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                               decoder_ffn_dim=32, max_position_embeddings=32, dropout=0.0, use_cache=False)
        x = ids()
        return tr.BartForConditionalGeneration(config), {"input_ids": x, "labels": x}

    def whisper():
        config = tr.WhisperConfig(vocab_size=VOCAB, d_model=16, encoder_layers=2, decoder_layers=2,
                                  encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                                  decoder_ffn_dim=32, num_mel_bins=8, max_source_positions=16,
                                  max_target_positions=16, dropout=0.0, use_cache=False, pad_token_id=0,
                                  decoder_start_token_id=1, eos_token_id=2, bos_token_id=1)
        return tr.WhisperForConditionalGeneration(config), {"input_features": torch.randn(2, 8, 32),
                                                            "decoder_input_ids": ids()}

    def mistral():
        return tr.MistralForCausalLM(_mistral_config(use_cache=False)), {"input_ids": ids(seq=12, low=1)}

    return {"distilbert": distilbert, "roberta": roberta, "bart": bart, "whisper": whisper,
            "mistral-sliding": mistral}


def _mistral_config(**kw):
    import transformers as tr

    return tr.MistralConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                            num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                            sliding_window=4, pad_token_id=0, **kw)


def hf_row(name: str) -> tuple[Callable, Callable, Callable]:
    torch.manual_seed(0)
    model, kwargs = _hf_models()[name]()
    model.eval()

    def step_of(m, kw):
        def step():
            with torch.no_grad():
                out = m(**kw)
            return (out.logits,) if getattr(out, "loss", None) is None else (out.logits, out.loss)
        return step

    ours = [step_of(xnf.to_xla(copy.deepcopy(model)), xnf.to_xla(kwargs)) for _ in range(2)]
    return step_of(model, kwargs), ours[0], ours[1]


NEW_TOKENS = 8
# generate() rows: (model, the unit compile() gets)
GENERATE_ROWS = {"mistral-generate": ("mistral", "forward"), "mistral-generate-call": ("mistral", "call"),
                 "gpt2-generate-call": ("gpt2", "call"), "t5-generate-call": ("t5", "call")}


def _generator(name: str):
    import transformers as tr

    if name == "mistral":
        return tr.MistralForCausalLM(_mistral_config(eos_token_id=None))
    if name == "gpt2":
        return tr.GPT2LMHeadModel(tr.GPT2Config(vocab_size=VOCAB, n_embd=16, n_layer=2, n_head=2, n_positions=64,
                                                bos_token_id=1, eos_token_id=2))
    return tr.T5ForConditionalGeneration(tr.T5Config(vocab_size=VOCAB, d_model=16, d_kv=8, d_ff=32, num_layers=2,
                                                     num_heads=2, decoder_start_token_id=0))


def generate_row(name: str, unit: str) -> tuple[Callable, Callable, Callable]:
    """A model's generate() with a fixed number of new tokens. Mistral's uses a static
    cache (each token's forward the same shape); GPT-2's and T5's the default dynamic
    one. unit "forward": the model's forward compiled, called once per token, as Hugging
    Face does with torch.compile; the rest of generate() (masks, logits processing,
    stopping checks) runs op by op. unit "call": the whole generate() call compiled; its
    stopping checks are host reads, each one a graph boundary, so a replay runs one
    graph per token."""
    torch.manual_seed(0)
    model = _generator(name).eval()
    model.generation_config.eos_token_id = None
    prompt = torch.randint(1, VOCAB, (1, 6))

    def gen_of(m, ids):
        # one cache for every call, as Hugging Face advises for compiled generation,
        # cleared in place before each: each token's forward reads the same tensors
        cache = StaticCache(config=m.config, max_cache_len=ids.shape[1] + NEW_TOKENS) if name == "mistral" else None

        def gen():
            with torch.no_grad():
                kwargs = {}
                if cache is not None:
                    cache.reset()
                    kwargs["past_key_values"] = cache
                return m.generate(ids, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False,
                                  pad_token_id=0, **kwargs)
        return gen

    from transformers import StaticCache

    steps = [gen_of(model, prompt)]
    for replay in (True, False):
        m = xnf.to_xla(copy.deepcopy(model))
        if unit == "forward":
            m.forward = xnf.compile(m.forward, replay=replay)
        steps.append(gen_of(m, prompt.to("jax")))
    return steps[0], steps[1], steps[2]


# ---------------------------------------------------------------- main


def all_rows() -> list[str]:
    return [f"{m}/{t}" for m in MODELS for t in ("inference", "train-sgd")] + list(_hf_models()) + list(GENERATE_ROWS)


def run_row(row: str) -> dict:
    name, unit = GENERATE_ROWS.get(row, (None, None))
    if unit is not None:
        ref, ours, traced = generate_row(name, unit)
    elif "/" in row:
        ref, ours, traced = zoo_row(*row.split("/"))
    else:
        ref, ours, traced = hf_row(row)
    # the forward row compiled its model's forward already
    compiled = ours if unit == "forward" else xnf.compile(ours)
    traced_c = traced if unit == "forward" else xnf.compile(traced, replay=False)
    notes_before = len(metrics.replay_notes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = measure(ref, lambda: _sync(compiled()), lambda: _sync(traced_c()), lambda: metrics.replays)
    if unit == "forward":  # forward calls: NEW_TOKENS per generate() call, the prefill one a new shape
        done, calls = result["replayed_calls"].split("/")
        result["replayed_calls"] = f"{done}/{int(calls) * NEW_TOKENS} forward calls"
    result["notes"] = metrics.replay_notes[notes_before:]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rows", nargs="*", help="zoo models (both steps), MODEL/TASK or Hugging Face rows")
    parser.add_argument("--zoo", action="store_true")
    parser.add_argument("--hf", action="store_true")
    parser.add_argument("--torch-threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.torch_threads)
    rows = all_rows()
    if args.zoo:
        rows = [r for r in rows if "/" in r]
    elif args.hf:
        rows = [r for r in rows if "/" not in r]
    elif args.rows:
        rows = [r for r in rows if r in args.rows or r.split("/")[0] in args.rows]
    print(f"{'row':<32} {'replayed':>18} {'torch ms':>9} {'compile()':>10} {'traced':>8}")
    for row in rows:
        try:
            r = run_row(row)
        except Exception as e:  # a row that fails says why and the others still run
            print(f"{row:<32} failed: {type(e).__name__}: {str(e)[:200]}")
            continue
        print(f"{row:<32} {r['replayed_calls']:>18} {r['torch_ms']:>9.2f} {r['replayed']:>9.2f}x {r['traced']:>7.2f}x",
              flush=True)
        for note in r["notes"]:
            print(f"    {note}")
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"compile(): time of compile(step) over PyTorch CPU eager's; traced: compile(step, replay=False). "
          f"Medians over {TURNS} turns of per-turn ratios of median calls.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
