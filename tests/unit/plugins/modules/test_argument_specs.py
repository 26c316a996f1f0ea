"""Every module's options, as AnsibleModule receives them, against a committed snapshot.

The argument spec is captured where it is finally used (``AnsibleModule.__init__``), so the test does not
depend on how a module builds it: inline, merged with the kube_auth options, or by a module base.
Options and return values are the collection's contract; a change here must be deliberate:
regenerate with ``GPUFLEET_UPDATE_ARGSPEC_SNAPSHOT=1`` and say why in a changelog fragment.
"""

import importlib
import json
import os

import pytest
from ansible.module_utils import basic

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(HERE))))
SNAPSHOT = os.path.join(HERE, "argument_specs.json")
MODULES = sorted(name[:-3] for name in os.listdir(os.path.join(ROOT, "plugins", "modules"))
                 if name.endswith(".py") and not name.startswith("_"))


class _Captured(Exception):
    def __init__(self, kwargs):
        super(_Captured, self).__init__("captured")
        self.kwargs = kwargs


def _jsonable(value):
    if isinstance(value, dict):
        return dict((str(k), _jsonable(v)) for k, v in sorted(value.items()))
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if callable(value):
        return "<callable %s>" % getattr(value, "__name__", type(value).__name__)
    return value


def capture(module_name, monkeypatch):
    """The keyword arguments the module's main() passes to AnsibleModule (argument_spec and the rest)."""

    def fake_init(self, *args, **kwargs):
        if args:
            kwargs = dict(kwargs, argument_spec=args[0])
        raise _Captured(kwargs)

    monkeypatch.setattr(basic.AnsibleModule, "__init__", fake_init)
    mod = importlib.import_module("ansible_collections.gpufleet.gpu_operator.plugins.modules.%s" % module_name)
    with pytest.raises(_Captured) as caught:
        mod.main()
    kwargs = caught.value.kwargs
    return _jsonable(kwargs)


def _snapshot():
    with open(SNAPSHOT) as handle:
        return json.load(handle)


def test_snapshot_lists_every_module():
    assert sorted(_snapshot()) == MODULES


@pytest.mark.parametrize("module_name", MODULES)
def test_argument_spec_unchanged(module_name, monkeypatch):
    got = capture(module_name, monkeypatch)
    if os.environ.get("GPUFLEET_UPDATE_ARGSPEC_SNAPSHOT"):
        data = _snapshot() if os.path.exists(SNAPSHOT) else {}
        data[module_name] = got
        with open(SNAPSHOT, "w") as handle:
            json.dump(data, handle, indent=1, sort_keys=True)
            handle.write("\n")
    assert got == _snapshot()[module_name]
    assert got["argument_spec"], "module %s has no options captured" % module_name
