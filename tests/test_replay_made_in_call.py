"""compile() replays steps that make modules and constant tensors inside the call
(Note [Modules made by the call] in runtime/frontends/replay.py), against PyTorch CPU;
and the note of a step that keeps being traced names its cause."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

import xla_native_functions as xnf
from xla_native_functions.runtime.platform.metrics import metrics

STEPS = 6


pytestmark = pytest.mark.usefixtures("fresh_graph_cache")


def _inputs(n=STEPS, shape=(4, 6)):
    torch.manual_seed(1)
    return [torch.randn(*shape) for _ in range(n)]


def _check_replays(fn, inputs, replayed=STEPS - 2):
    """Runs fn on PyTorch CPU and compiled on our device; values match at every call
    and the calls from the third on are replays."""
    compiled = xnf.compile(fn)
    for x in inputs:
        torch.testing.assert_close(xnf.to_torch(compiled(xnf.to_xla(x))), fn(x), atol=1e-5, rtol=1e-5)
    assert metrics.replays == replayed, xnf.metrics_report()


class _Head(torch.nn.Module):
    """DistilBERT's classification head: a ReLU module made in forward."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.pre = torch.nn.Linear(6, 6)
        self.out = torch.nn.Linear(6, 3)

    def forward(self, x):
        return self.out(torch.nn.ReLU()(self.pre(x)))


def test_module_made_in_forward_is_replayed():
    ref = _Head().eval()
    ours = xnf.to_xla(copy.deepcopy(ref))

    compiled = xnf.compile(ours)
    for x in _inputs():
        with torch.no_grad():
            torch.testing.assert_close(xnf.to_torch(compiled(xnf.to_xla(x))), ref(x), atol=1e-5, rtol=1e-5)
    # the first call learns which parameters may get a .grad; the next two trace the same plan
    assert metrics.replays == STEPS - 3, xnf.metrics_report()


def test_module_made_per_lookup_is_replayed():
    """transformers' ACT2FN builds a new activation module on every lookup."""
    act2fn = pytest.importorskip("transformers.activations").ACT2FN
    _check_replays(lambda x: act2fn["gelu_new"](x) + act2fn["silu"](x), _inputs())


def test_loss_module_made_in_forward_trains_and_is_replayed():
    """BART, Whisper and ALBERT build CrossEntropyLoss() in forward when given labels."""
    torch.manual_seed(0)
    ref = torch.nn.Linear(6, 3)
    ours = xnf.to_xla(copy.deepcopy(ref))

    def step_of(model, opt):
        def step(x, y):
            opt.zero_grad()
            loss = torch.nn.CrossEntropyLoss()(torch.nn.Tanh()(model(x)), y)
            loss.backward()
            opt.step()
            return loss.detach()
        return step

    ref_step = step_of(ref, torch.optim.SGD(ref.parameters(), lr=0.1))
    step = xnf.compile(step_of(ours, torch.optim.SGD(ours.parameters(), lr=0.1)))
    labels = torch.tensor([0, 2, 1, 0])
    for x in _inputs():
        torch.testing.assert_close(xnf.to_torch(step(xnf.to_xla(x), xnf.to_xla(labels))), ref_step(x, labels))
    for p, q in zip(ours.parameters(), ref.parameters()):
        torch.testing.assert_close(xnf.to_torch(p), q, atol=1e-5, rtol=1e-5)
    # the first step creates the .grads, the next two trace the same plan
    assert metrics.replays == STEPS - 3, xnf.metrics_report()


def test_training_flag_of_a_kept_module_is_still_guarded_next_to_made_ones():
    torch.manual_seed(0)
    ref = torch.nn.BatchNorm1d(6)
    ours = xnf.to_xla(copy.deepcopy(ref))

    def step_of(bn):
        def step(x):
            with torch.no_grad():
                return torch.nn.ReLU()(bn(x))
        return step

    ref_step, step = step_of(ref), xnf.compile(step_of(ours))
    for i, x in enumerate(_inputs(8)):
        if i == 5:  # after replays began: eval mode normalizes with the running statistics
            ref.eval()
            ours.eval()
        torch.testing.assert_close(xnf.to_torch(step(xnf.to_xla(x))), ref_step(x), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(xnf.to_torch(ours.running_mean), ref.running_mean, atol=1e-5, rtol=1e-5)
    # calls 4 and 5 replay in training mode (the first learns which parameters may get a
    # .grad), 8 in eval mode (6 and 7 trace its plan)
    assert metrics.replays == 3, xnf.metrics_report()


@pytest.mark.parametrize("make", [
    lambda x: x * torch.tensor(2.0).to(x.device),
    lambda x: x * torch.as_tensor(2.0).to(x.device),
    lambda x: x + torch.full((6,), 0.5).to(x.device),
    lambda x: x + torch.full((6,), 0.5, device=x.device),
    lambda x: torch.where(torch.arange(6).to(x.device) < torch.tensor(3), x, -x),
    lambda x: x * torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], device=x.device),
    lambda x: x * torch.tensor(2.0),  # a zero-dim CPU tensor made in the call, used directly
], ids=["tensor-to", "as_tensor-to", "full-to", "full-device", "arange-compare", "tensor-device", "zero-dim-cpu"])
def test_constant_tensor_made_from_python_values_is_replayed(make):
    _check_replays(make, _inputs())


def test_constant_tensor_made_on_our_device_is_read_after_a_host_read():
    """torch.tensor(data, device=...) writes a concrete value into a storage the trace
    made; a host read runs the graph recorded so far, and the tensor keeps its value
    (Hugging Face's generate() makes its special tokens this way, then reads
    `(eos < 0).any()`)."""

    def step(x):
        eos = torch.tensor([5.0, 6.0, 7.0, 8.0, 9.0, 10.0], device=x.device)
        if (eos < 0).any():
            return x
        return x * eos

    _check_replays(step, _inputs())


def test_constant_tensor_made_on_our_device_in_lazy_mode_survives_a_host_read():
    x = torch.randn(6)
    with xnf.lazy_mode():
        eos = torch.tensor([5.0, 6.0, 7.0, 8.0, 9.0, 10.0], device="jax")
        assert bool((xnf.to_xla(x).sum() > -100).item())
        torch.testing.assert_close(xnf.to_torch(xnf.to_xla(x) * eos), x * torch.arange(5.0, 11.0))


def test_constant_that_changes_every_call_is_traced_and_says_why():
    calls = [0]

    def step(x):
        calls[0] += 1
        return x * torch.tensor(float(calls[0])).to(x.device)

    compiled = xnf.compile(step)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, x in enumerate(_inputs(8)):
            # the reference computes the value the call will use, before the call
            expected = x * float(calls[0] + 1)
            torch.testing.assert_close(xnf.to_torch(compiled(xnf.to_xla(x))), expected)
    assert metrics.replays == 0
    assert any("graph inputs come from" in n and "Python values" in n for n in metrics.replay_notes), \
        metrics.replay_notes


def test_cpu_tensor_made_before_the_call_and_only_read_is_a_guarded_constant():
    """BEiT's pattern: an index built once on the CPU (functools.lru_cache) and read by
    every call. It replays; writing it in place between calls, through a view too,
    makes the next call trace again with the new values (Note [CPU constants])."""
    import functools

    @functools.lru_cache
    def index():
        return torch.tensor([[2, 0], [1, 3]])

    def step(table):
        return table[index().view(-1)] * 2

    compiled = xnf.compile(step)
    table = torch.randn(4, 3)
    ours = xnf.to_xla(table)

    def check():
        torch.testing.assert_close(xnf.to_torch(compiled(ours)), step(table))

    for _ in range(5):
        check()
    assert metrics.replays == 2, xnf.metrics_report()
    index()[0, 0] = 3  # written between calls: the replay's constant is stale
    check()
    index().view(-1)[1] = 1
    for _ in range(4):
        check()
    assert metrics.replays == 4, xnf.metrics_report()  # the last two: two equal traces first
    assert not metrics.replay_notes, metrics.replay_notes


def test_cpu_tensor_made_before_the_call_and_written_by_it_is_traced_and_says_why():
    counter = torch.zeros(())

    def step(x):
        counter.view(()).add_(1)  # through a view of it
        return x * counter.item()

    compiled = xnf.compile(step)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k, x in enumerate(_inputs(8)):
            torch.testing.assert_close(xnf.to_torch(compiled(xnf.to_xla(x))), x * float(k + 1))
    assert metrics.replays == 0
    (note,) = [n for n in metrics.replay_notes if "step" in n]
    assert "writes a CPU tensor made before the call (shape (), torch.float32)" in note and "to_xla" in note, note
    assert "AdamW" not in note, note


def test_distilbert_classifier_with_labels_is_replayed():
    """DistilBertForSequenceClassification: nn.ReLU()(x) in its head and a loss module
    built in forward."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.DistilBertConfig(vocab_size=32, dim=8, n_layers=1, n_heads=2, hidden_dim=16,
                                           max_position_embeddings=16, dropout=0.0, attention_dropout=0.0,
                                           seq_classif_dropout=0.0, num_labels=3)
    ref = transformers.DistilBertForSequenceClassification(config).eval()
    ours = xnf.to_xla(copy.deepcopy(ref))
    ids, labels = torch.randint(0, 32, (2, 5)), torch.tensor([0, 2])

    def step_of(model):
        def step(ids, labels):
            with torch.no_grad():
                out = model(input_ids=ids, labels=labels)
            return out.loss, out.logits
        return step

    expected = step_of(ref)(ids, labels)
    compiled = xnf.compile(step_of(ours))
    for _ in range(STEPS):
        loss, logits = compiled(xnf.to_xla(ids), xnf.to_xla(labels))
        torch.testing.assert_close(xnf.to_torch(loss), expected[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(xnf.to_torch(logits), expected[1], atol=1e-5, rtol=1e-5)
    assert metrics.replays == STEPS - 3, xnf.metrics_report()


def test_mistral_generate_call_is_replayed_per_stopping_length():
    """The whole generate() call compiled, with an end-of-sequence token: its special
    tokens are tensors made on our device, its stopping check a host read per token.
    Prompts that stop after different numbers of tokens each get their plan, and calls
    alternating between them replay with PyTorch's tokens (Note [Paths of a call])."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.MistralConfig(vocab_size=16, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32,
                                        pad_token_id=0, eos_token_id=3)
    ref = transformers.MistralForCausalLM(config).eval()
    ours = xnf.to_xla(copy.deepcopy(ref))

    def generate_of(model):
        def generate(ids):
            with torch.no_grad():
                return model.generate(ids, max_new_tokens=6, do_sample=False)
        return generate

    ref_generate = generate_of(ref)
    by_length: dict[int, torch.Tensor] = {}  # prompts by the length PyTorch generates
    for _ in range(40):
        ids = torch.randint(4, 16, (1, 4))
        by_length.setdefault(ref_generate(ids).shape[1], ids)
    assert len(by_length) >= 2, "every prompt stopped at the same length"
    short, long = by_length[min(by_length)], by_length[max(by_length)]
    compiled = xnf.compile(generate_of(ours))
    # a signature's first trace differs from later ones (what .grads it meets), so its
    # first path is confirmed by the third call, the second path by its second
    order = [short] * 3 + [long] * 2 + [short, long] * 3
    for ids in order:
        torch.testing.assert_close(xnf.to_torch(compiled(xnf.to_xla(ids))), ref_generate(ids))
    assert metrics.replays == 6, xnf.metrics_report()


def test_every_part_of_a_plan_has_a_name_for_the_note():
    """The note of a step whose plan keeps changing names the part that changed: a new
    part of the fingerprint needs its words in _FINGERPRINT_PARTS."""
    from xla_native_functions.runtime.frontends import replay

    compiled = xnf.compile(lambda x: x * 2)
    x = xnf.to_xla(torch.ones(3))
    for _ in range(3):
        compiled(x)
    (entry,) = compiled.signatures.values()
    assert entry.plans
    assert len(entry.plans[0].fingerprint) == len(replay._FINGERPRINT_PARTS)
    assert len(entry.plans[0].fingerprint[0][0]) == len(replay._SEGMENT_PARTS)


@pytest.mark.parametrize("writer", ["numpy", "inference_mode"])
def test_cpu_constant_written_without_a_version_bump_is_seen(writer):
    """Writes through NumPy sharing the memory, or to an inference tensor, bump no
    version counter: the replay compares the values (Note [CPU constants])."""
    import numpy as np

    if writer == "numpy":
        values = np.array([2, 0, 1])
        index = torch.from_numpy(values)
    else:
        with torch.inference_mode():
            index = torch.tensor([2, 0, 1])

    def step(table):
        with torch.inference_mode(writer == "inference_mode"):
            return table[index] * 2

    compiled = xnf.compile(step)
    table = torch.randn(4, 3)
    ours = xnf.to_xla(table)
    for k in range(9):
        if k == 5:
            if writer == "numpy":
                values[0] = 3
            else:
                with torch.inference_mode():
                    index[0] = 3
        torch.testing.assert_close(xnf.to_torch(compiled(ours)), step(table))
    assert metrics.replays == 5, xnf.metrics_report()  # calls 2-4 and 7-8


def test_large_cpu_tensor_read_by_the_call_is_traced_and_says_why():
    from xla_native_functions.runtime.frontends import replay

    big = torch.zeros(replay.CPU_CONSTANT_BYTES // 4 + 1)  # float32, one element over

    def step(x):
        return x + big[:4].to(x.device)

    compiled = xnf.compile(step)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k, x in enumerate(_inputs(8, shape=(4,))):
            big[0] = float(k)
            torch.testing.assert_close(xnf.to_torch(compiled(xnf.to_xla(x))), step(x))
    assert metrics.replays == 0
    (note,) = [n for n in metrics.replay_notes if "step" in n]
    assert "larger than 64 KiB" in note and "to_xla" in note, note


def _gpt2(transformers):
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=32, n_embd=16, n_layer=1, n_head=2,
                                                                n_positions=32))


def _t5(transformers):
    return transformers.T5ForConditionalGeneration(transformers.T5Config(
        vocab_size=32, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2, decoder_start_token_id=0))


@pytest.mark.parametrize("build", [_gpt2, _t5], ids=["gpt2", "t5-encoder-decoder"])
def test_generate_call_replays_with_pytorch_tokens(build):
    """The whole generate() call compiled, default dynamic cache: replayed from the
    fourth call (the first trace differs in the .grad state it meets), new prompts of
    the same shape give PyTorch's tokens."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    ref = build(transformers).eval()
    ref.generation_config.eos_token_id = None
    ours = xnf.to_xla(copy.deepcopy(ref))

    def generate_of(model):
        def generate(ids):
            with torch.no_grad():
                return model.generate(ids, max_new_tokens=4, do_sample=False, pad_token_id=0)
        return generate

    compiled = xnf.compile(generate_of(ours))
    for _ in range(5):
        ids = torch.randint(1, 32, (2, 5))
        torch.testing.assert_close(xnf.to_torch(compiled(xnf.to_xla(ids))), generate_of(ref)(ids))
    assert metrics.replays == 2, xnf.metrics_report()
