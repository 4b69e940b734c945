"""CompiledModule: what compile(module) returns, an nn.Module whose calls run compiled.

    m2 = compile(model)            # model: any nn.Module
    m2(x)                          # compiled forward (and backward)
    m2.state_dict().keys() == model.state_dict().keys()   # the original's names, no prefix
    m2.eval(); m2.lm_head          # modes reach the original; unknown attributes are read from it

It shares the original's parameters and buffers (the original is its one child, `_orig_mod`), so an
optimizer built on either updates both.  Unlike torch.compile's OptimizedModule, names carry no
`_orig_mod.` prefix: a state dict saved from either loads into either, also when the compiled module
sits inside a bigger model.  `named_modules()` lists the original's modules under their own names
(the wrapper itself is not listed: it has no parameters or buffers of its own).
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping, Optional

import torch

_ORIG = "_orig_mod"


class CompiledModule(torch.nn.Module):
    def __init__(self, module: torch.nn.Module, compiled: Any):
        super().__init__()
        self._orig_mod = module  # the one child: .to(), train(), zero_grad(), apply() reach it
        # A plain attribute (not a Module): the CompiledFunction that compiles module's calls.
        self.__dict__["_compiled"] = compiled
        # Loading as part of a bigger model goes through _load_from_state_dict, not load_state_dict.
        self.register_load_state_dict_pre_hook(_add_prefix)
        self.register_load_state_dict_post_hook(_drop_prefix_from_report)

    @property
    def training(self) -> bool:  # the original's mode, also after model.eval() on the original itself
        return self._orig_mod.training

    @training.setter
    def training(self, mode: bool) -> None:
        if _ORIG in self.__dict__.get("_modules", {}):  # nn.Module.__init__ sets a default: not ours to keep
            self._orig_mod.training = mode

    @property
    def session(self) -> Any:
        """The CompileSession of the latest compilation."""
        return self._compiled.session

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._compiled(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)  # parameters, buffers, children (only `_orig_mod`)
        except AttributeError:
            if name == _ORIG:
                raise
            return getattr(self._orig_mod, name)  # m2.config, m2.lm_head, ...

    def named_modules(self, memo: Optional[set] = None, prefix: str = "",
                      remove_duplicate: bool = True) -> Iterator[tuple[str, torch.nn.Module]]:
        # named_parameters/named_buffers/parameters walk this, so all of them use the original's names.
        yield from self._orig_mod.named_modules(memo, prefix, remove_duplicate)

    def state_dict(self, *args: Any, destination: Any = None, prefix: str = "", keep_vars: bool = False) -> Any:
        # A parent's state_dict() calls this with its prefix: the original's keys, under the parent's name.
        return self._orig_mod.state_dict(*args, destination=destination, prefix=prefix, keep_vars=keep_vars)

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False) -> Any:
        return self._orig_mod.load_state_dict(state_dict, strict=strict, assign=assign)

    def __repr__(self) -> str:
        return f"CompiledModule({self._orig_mod!r})"


def _add_prefix(module: torch.nn.Module, state_dict: dict, prefix: str, *_: Any) -> None:
    """Loading into a parent: its keys name the original's tensors as `prefix + key`; its child is `_orig_mod`."""
    for key in [k for k in state_dict if k.startswith(prefix) and not k.startswith(prefix + _ORIG + ".")]:
        state_dict[prefix + _ORIG + "." + key[len(prefix):]] = state_dict.pop(key)


def _drop_prefix_from_report(module: torch.nn.Module, incompatible: Any) -> None:
    """Missing or unexpected keys are reported under the names the user's state dict uses."""
    for keys in (incompatible.missing_keys, incompatible.unexpected_keys):
        keys[:] = [k.replace(_ORIG + ".", "", 1) if k.startswith(_ORIG + ".") else k.replace("." + _ORIG + ".", ".", 1)
                   for k in keys]
