"""`xnf.config` rejects misspelt setting names and values of the wrong type instead of
silently doing nothing (runtime/config.py)."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest

import xla_native_functions as xnf
from xla_native_functions.runtime.platform.config import Config


@pytest.fixture
def config():
    # a fresh instance: the process-wide one stays untouched
    return Config()


def test_misspelt_name_raises_with_a_suggestion(config):
    with pytest.raises(AttributeError, match=r"no setting 'allow_cpu_falback'; did you mean 'allow_cpu_fallback'\?"):
        config.allow_cpu_falback = True
    with pytest.raises(AttributeError, match="did you mean 'check_index_values'"):
        config.check_index_value  # noqa: B018
    assert config.allow_cpu_fallback is False


def test_unknown_name_without_a_close_one_lists_the_settings(config):
    with pytest.raises(AttributeError, match="settings: debug_print_each_op, .*transposed_weight_copies"):
        config.completely_different = 1


def test_process_config_rejects_misspelt_names():
    with pytest.raises(AttributeError, match="did you mean 'allow_cpu_fallback'"):
        xnf.config.allow_cpu_falback = True
    assert not hasattr(xnf.config, "allow_cpu_falback")


@pytest.mark.parametrize("name,value,expected", [
    ("allow_cpu_fallback", 1, "bool"),
    ("allow_cpu_fallback", "yes", "bool"),
    ("check_index_values", None, "bool"),
    ("donate_min_bytes", 1.5, "int"),
    ("donate_min_bytes", True, "int"),
    ("donate_min_bytes", "1MB", "int"),
    ("accuracy_atol", "1e-5", "float"),
    ("accuracy_atol", False, "float"),
    ("debug_dump_graphs", 3, "str or None"),
])
def test_wrong_type_raises_naming_the_type(config, name, value, expected):
    before = getattr(config, name)
    with pytest.raises(TypeError, match=rf"config\.{name} takes an? {expected}, not {type(value).__name__}"):
        setattr(config, name, value)
    assert getattr(config, name) == before


def test_right_types_are_kept(config, tmp_path):
    config.allow_cpu_fallback = True
    config.donate_min_bytes = 0
    config.accuracy_atol = 0  # an int is a fine float
    assert (config.allow_cpu_fallback, config.donate_min_bytes, config.accuracy_atol) == (True, 0, 0.0)
    assert type(config.accuracy_atol) is float
    config.debug_dump_graphs = tmp_path  # a Path is a fine directory name
    assert config.debug_dump_graphs == str(tmp_path)
    config.debug_dump_graphs = None
    assert config.debug_dump_graphs is None


def test_config_stays_a_dataclass_with_its_fields(config):
    assert dataclasses.is_dataclass(config)
    assert [f.name for f in dataclasses.fields(Config)] == [
        "debug_print_each_op", "debug_accuracy_for_each_op", "accuracy_atol", "accuracy_rtol", "debug_dump_graphs",
        "allow_cpu_fallback", "check_index_values", "donate_min_bytes", "eager_cache_bytes", "transposed_weight_copies",
        "channels_last_convolutions", "first_calls_on_cpu"]
    assert copy.copy(config) == config and pickle.loads(pickle.dumps(config)) == config
    assert dataclasses.replace(config, donate_min_bytes=5).donate_min_bytes == 5
    with pytest.raises(TypeError):
        Config(donate_min_bytes="big")


def test_monkeypatching_a_setting_still_works(monkeypatch):
    monkeypatch.setattr(xnf.config, "check_index_values", False)
    assert xnf.config.check_index_values is False
