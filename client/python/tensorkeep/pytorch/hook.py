"""smdebug's PyTorch ``Hook``, writing to a tensorkeep collector.

::

    import tensorkeep.pytorch as tkp
    hook = tkp.Hook("tensorkeep://127.0.0.1:7000/my-trial",
                    save_config=tkp.SaveConfig(save_interval=100),
                    include_collections=["weights", "gradients", "losses"])
    hook.register_module(model)
    hook.register_loss(loss_fn)
    hook.set_mode(tkp.modes.TRAIN)
    for x, y in data:
        loss = loss_fn(model(x), y)       # the model's forward starts a new step
        loss.backward(); opt.step()
        if hook.should_stop():           # a rule with the "stop" action fired
            break
    hook.close()

Tensor names are smdebug's, so rules and notebooks written for smdebug find the
same tensors:

* parameters: ``<RootModuleClass>_<parameter name>`` (``Sequential_0.weight``,
  ``Net_fc1.weight``), saved when the registered module's forward starts, i.e. the
  values used by that step's forward pass;
* gradients: ``gradient/<parameter name as above>``, saved from tensor hooks
  during the backward pass;
* inputs and outputs of submodules: ``<submodule name>_input_<i>`` /
  ``<submodule name>_output_<i>`` (names from ``named_modules()``; the root module
  is named by its class), saved when a collection matches them;
* the registered loss: ``<LossClass>_output_0`` (``CrossEntropyLoss_output_0``);
* ``save_scalar(name, v)``: ``scalar/<name>``.

Steps are smdebug's: every forward of the registered module starts a new global
step and a new step of the current mode (both start at 0). A step is saved when
one of the saved collections' ``SaveConfig`` selects the *mode step*; gradients
are never saved in EVAL or PREDICT mode.

Distributed training (docs/python.md, "Distributed training"): the worker is
``worker_<rank>``, rank and world size taken when the first step starts
(torch.distributed, else RANK/WORLD_SIZE, else worker_0 of 1), so the hook may be
made before ``init_process_group``; a DistributedDataParallel wrapper registers
the model it wraps (the plain model's names); ``gradients="local"`` saves each
rank's gradient before DDP's all-reduce, ``"all_reduced"`` the averaged one;
``should_stop()`` is a collective so that every rank stops at the same step. A
hook left open closes at exit with end of training after a normal end, without
it after an uncaught exception or SIGTERM.

Threading: a hook is used from the training thread (forward, backward and the
calls above). Tensors are detached and copied on that thread, then sent by the
``tensorkeep.Writer`` in the background. Only the registered module's forward
pre-hook (which counts steps) stays attached for the hook's life; the forward
hooks of submodules and the loss and the gradient hooks of parameters are
attached while steps save and removed while they do not, so a step that saves
nothing runs PyTorch's own code paths.
"""

from __future__ import annotations

import atexit
import functools
import logging
import threading
import weakref
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from tensorkeep import _malloc
from tensorkeep._dtypes import NATIVE_CODES as _NATIVE_DTYPES
from tensorkeep.core import config_changes

from . import _process_exit
from ._ranks import dist_group_for_stop as _dist_group_for_stop
from ._ranks import dist_rank_and_size as _dist_rank_and_size
from ._ranks import env_rank_and_size as _env_rank_and_size
from ._stop_poller import StopPoller as _StopPoller
from ._tensor_values import as_cpu_tensor as _as_cpu_tensor
from ._tensor_values import copy_value as _copy_value
from ._tensor_values import re_escape as _re_escape
from ._tensor_values import reductions as _reductions
from ._tensor_values import to_numpy as _to_numpy
from ._modes import EVAL, GLOBAL, PREDICT, client_mode, mode_value
from .collection import (
    SCALAR_COLLECTIONS,
    TRAIN_ONLY_COLLECTIONS,
    Collection,
    CollectionKeys,
    CollectionManager,
)
from .reduction_config import ReductionConfig
from .save_config import SaveConfig, SaveConfigMode

logger = logging.getLogger("tensorkeep.pytorch")

__all__ = ["Hook", "get_hook", "set_hook", "del_hook"]

DEFAULT_INCLUDE_COLLECTIONS = [CollectionKeys.LOSSES]
DEFAULT_WORKER_NAME = "worker_0"

_SKIP = None  # plan of a tensor that is not saved at this step
_UNDECIDED = object()
# A module's forward hook is attached for a step when one of its inputs or
# outputs numbered below this (or a tensor name of a collection, whatever its
# number) can be saved (see Hook._target_saves).
_PROBED_IO = 100
# Sets of saved collections (with a mode) whose plans and callbacks are kept
# (see _compute_step_collections).
_PLAN_SETS = 64
_NEVER = float("inf")  # _quiet_until when no collection of the mode saves again

_hook_lock = threading.Lock()
_current_hook: Optional["Hook"] = None


def get_hook(json_config_path: Optional[str] = None, create_if_not_exists: bool = False) -> Optional["Hook"]:
    """The hook most recently created in this process (smdebug's singleton), or None.

    With ``create_if_not_exists`` and no hook yet, one is created from SageMaker's
    JSON configuration (``json_config_path``, else ``$SMDEBUG_CONFIG_FILE_PATH``,
    else ``/opt/ml/input/config/debughookconfig.json``; see
    ``tensorkeep.pytorch.json_config``) when that file exists, as smdebug does;
    without the file the answer stays None.
    """
    with _hook_lock:
        hook = _current_hook
    if hook is None and create_if_not_exists:
        try:
            hook = Hook.create_from_json_file(json_config_path)
        except FileNotFoundError:
            return None
    return hook


def set_hook(hook: Optional["Hook"]) -> None:
    global _current_hook
    with _hook_lock:
        _current_hook = hook


def del_hook() -> None:
    set_hook(None)


def _make_writer(out_dir: str, worker: str, num_workers: int, **options: Any) -> Any:
    """Creates the client's Writer (a seam: tests replace it with a fake);
    ``options``: the Writer's keyword arguments the Hook was given."""
    from tensorkeep import Writer

    return Writer(out_dir, worker=worker, num_workers=num_workers, **options)


def _refuse_ended_trial(out_dir: str) -> None:
    """Raises Conflict at Hook() when ``out_dir`` names a trial that has ended: a
    script run a second time into the same trial (smdebug refuses an existing
    out_dir at once). The collector refuses such a writer too; asking first
    fails before the training runs. An unreachable collector is not an error
    here (the writer retries in the background)."""
    from tensorkeep import _address, _channel
    from tensorkeep.exceptions import Conflict

    addr = _address.parse(out_dir, write=True)
    channel = _channel.open_channel(addr.target)
    try:
        summary = _channel.pb_grpc.TensorKeepStub(channel).GetTrial(
            _channel.pb.TrialRef(trial=addr.trial), timeout=5.0
        )
    except Exception:  # noqa: BLE001 - not written yet, or no collector yet
        return
    finally:
        channel.close()
    if summary.ended:
        raise Conflict(
            f"trial '{addr.trial}' on the collector {addr.target} has ended: this run cannot "
            f"write into it. Give the run a new trial name (out_dir), or delete the old trial first"
        )


def _close_at_exit(ref: "weakref.ReferenceType[Hook]") -> None:
    hook = ref()
    if hook is not None and not hook._closed:
        finished = _process_exit.ended_normally()
        if not finished:
            logger.warning(
                "tensorkeep: the process ends with %s: closing %s without end of training",
                "SIGTERM" if _process_exit.terminated_by() is not None else "an uncaught exception",
                hook.worker,
            )
        try:
            hook._close(end_of_training=finished, timeout=10.0 if finished else _process_exit.TERM_EXIT_CLOSE_SECONDS)
        except Exception:  # pragma: no cover - best effort at interpreter exit
            logger.exception("tensorkeep: closing the hook at exit failed")


class Hook:
    """Saves tensors of a PyTorch model to a tensorkeep trial (smdebug's ``smdebug.pytorch.Hook``).

    Args:
      out_dir: ``tensorkeep://HOST:PORT/TRIAL`` (or what ``tensorkeep.Writer`` accepts).
      export_tensorboard, tensorboard_dir: write TensorBoard event files of the trial
        into ``tensorboard_dir`` (one run directory per worker) as steps complete,
        by running ``tensorkeep export-tensorboard --follow`` (the CLI, found at
        ``$TENSORKEEP_CLI`` or on PATH; refused without it) from the process of
        rank 0. As in smdebug, a ``tensorboard_dir`` alone also exports;
        ``export_tensorboard=True`` alone writes to ``./tensorboard/<trial>``.
      dry_run: when True, nothing is sent (and no connection is made).
      reduction_config: the default ``ReductionConfig`` of collections that have
        none; default: save the full tensors.
      save_config: the default ``SaveConfig`` (or ``SaveConfigMode``, or a
        ``{mode: SaveConfigMode}`` dict) of collections that have none; default:
        every 500 steps.
      include_regex: regexes added to the ``default`` collection, which is then saved.
      include_collections: names of the collections to save (``losses`` is always
        added, as in smdebug). Default: ``["losses"]``.
      save_all: save every tensor (the ``all`` collection, regex ``.*``).
      include_workers: ``"one"`` (smdebug's default: only ``worker_0`` saves, the
        trial expects one worker) or ``"all"`` (every rank saves; the trial expects
        the world size).
      worker: this process's worker name; default ``worker_<rank>``, the rank
        taken when the first step starts (so a hook may be made before
        ``init_process_group``): from ``torch.distributed`` when initialised,
        else the ``RANK`` / ``WORLD_SIZE`` environment variables (torchrun),
        else ``worker_0``. Naming it makes this process save whatever
        ``include_workers`` says.
      num_workers: how many workers the trial expects; default as above.
      gradients: ``"local"`` (default, as smdebug): each rank's own gradient,
        captured during backward before DistributedDataParallel averages it;
        ``"all_reduced"``: the gradient DDP averaged over the ranks (what the
        optimizer applies), captured from DDP's all-reduce; requires
        registering the DistributedDataParallel wrapper (in one process the
        two are the same).
      max_stall_seconds: the longest a training step waits for the collector
        (away, or slower than training) before the node's tensorkeep-agent
        journals what the step saves to local disk, to push it in order once the
        collector is back; default ``$TENSORKEEP_MAX_STALL_SECONDS``, else 5
        (``math.inf``: never journal). See docs/python.md.
    """

    GRADIENT_PREFIX = "gradient/"
    SCALAR_PREFIX = "scalar/"
    INPUT_TENSOR_SUFFIX = "_input_"
    OUTPUT_TENSOR_SUFFIX = "_output_"

    def __init__(
        self,
        out_dir: Optional[str] = None,
        export_tensorboard: bool = False,
        tensorboard_dir: Optional[str] = None,
        dry_run: bool = False,
        reduction_config: Optional[ReductionConfig] = None,
        save_config: Union[SaveConfig, SaveConfigMode, Dict[Any, Any], None] = None,
        include_regex: Optional[Union[str, Sequence[str]]] = None,
        include_collections: Optional[Sequence[str]] = None,
        save_all: bool = False,
        include_workers: str = "one",
        worker: Optional[str] = None,
        num_workers: Optional[int] = None,
        gradients: str = "local",
        max_stall_seconds: Optional[float] = None,
    ):
        if not dry_run and not out_dir:
            raise ValueError("out_dir must be a tensorkeep URL: tensorkeep://HOST:PORT/TRIAL")
        if (export_tensorboard or tensorboard_dir) and not dry_run:
            from . import tensorboard

            tensorboard.find_cli()  # refuse before anything connects
        if include_workers not in ("one", "all"):
            raise ValueError(f"include_workers={include_workers!r} must be 'one' or 'all'")
        if reduction_config is not None and not isinstance(reduction_config, ReductionConfig):
            raise TypeError("reduction_config must be a tensorkeep.pytorch.ReductionConfig")
        if gradients not in ("local", "all_reduced"):
            raise ValueError(f"gradients={gradients!r} must be 'local' or 'all_reduced'")
        if num_workers is not None and int(num_workers) < 1:
            raise ValueError(f"num_workers={num_workers} must be >= 1")
        self.gradients = gradients
        # Checked now (a bad value or environment variable fails here, not at the first step).
        from tensorkeep.writer import max_stall_from

        self.max_stall_seconds = max_stall_from(max_stall_seconds)
        # So that the hook's allocations do not make glibc hand the heap's top
        # back and fault it in again, every few steps (see _malloc).
        _malloc.pin()

        self.out_dir = out_dir
        self.dry_run = bool(dry_run)
        self.save_all = bool(save_all)
        self.include_workers = include_workers

        # -- configuration (smdebug's BaseHook.__init__) ----------------------------
        self.collection_manager = CollectionManager()
        if include_collections is None:
            names = list(DEFAULT_INCLUDE_COLLECTIONS)
        else:
            if isinstance(include_collections, str):
                include_collections = [include_collections]
            names = [str(n) for n in include_collections]
            for n in DEFAULT_INCLUDE_COLLECTIONS:
                if n not in names:
                    names.append(n)
        self.include_collections: List[str] = names
        self.save_config = SaveConfig.parse(save_config)
        self.save_config.merge_default_save_config(SaveConfig())
        self.reduction_config = (
            reduction_config if reduction_config is not None else ReductionConfig(save_raw_tensor=True)
        )
        if include_regex is not None:
            if isinstance(include_regex, str):
                include_regex = [include_regex]
            self.collection_manager.get(CollectionKeys.DEFAULT).include(list(include_regex))
            if CollectionKeys.DEFAULT not in self.include_collections:
                self.include_collections.append(CollectionKeys.DEFAULT)
        self.include_regex = include_regex
        if self.save_all:
            self.collection_manager.get(CollectionKeys.ALL).include(".*")
            if CollectionKeys.ALL not in self.include_collections:
                self.include_collections.append(CollectionKeys.ALL)

        # -- worker: resolved at the first step (see _resolve_worker) -------------------
        self._worker_arg = worker
        self._num_workers_arg = None if num_workers is None else int(num_workers)
        self.worker = worker if worker is not None else DEFAULT_WORKER_NAME
        self.num_workers = self._num_workers_arg or 1
        self._writes = False
        self._resolved = False

        # -- step state (smdebug's CallbackHook: init_step = -1) ---------------------
        self.step = -1
        self._mode = GLOBAL
        self._client_mode = client_mode(GLOBAL)
        self._mode_steps: Dict[int, int] = {GLOBAL: -1}

        # -- saving state -----------------------------------------------------------
        self.prepared_collections = False
        self._collections_to_save: List[Collection] = []
        self._by_mode: Dict[int, List[Tuple[Collection, SaveConfigMode]]] = {}
        self._cm_version = -1
        self._resolved_modules: set = set()
        self._tensor_colls: Dict[str, FrozenSet[Collection]] = {}
        self._step_colls: FrozenSet[Collection] = frozenset()
        self._plans: Dict[str, Any] = {}
        # The plans of each mode and set of saved collections seen (steps
        # alternate between a few when collections save at different
        # intervals, or training and evaluation alternate).
        self._plans_by_colls: Dict[Tuple[int, FrozenSet[Collection]], Dict[str, Any]] = {}
        self._plans_mode = -1  # the mode of _plans
        self._saving = False  # this step saves something: the hot-path flag
        # The quiet stretch: steps of mode _quiet_mode numbered below
        # _quiet_until save nothing while config_changes.count is _quiet_count
        # (see forward_pre_hook).
        self._quiet_mode = -1
        self._quiet_until = -1
        self._quiet_count = -1
        self._io_counts: Dict[str, int] = {}
        self._grads_done: set = set()
        self._wrote_step = False
        self._scalar_cache: Dict[str, Tuple[Any, int, int, int]] = {}
        self._pending: List[Tuple[str, Any, Tuple[str, ...]]] = []  # save_tensor before step 0
        self._warned: set = set()
        self._disabled = False
        self._closed = False
        # All-reduced gradients: (name, value, step) from DDP's communication hook.
        self._reduced: List[Tuple[str, torch.Tensor, int]] = []
        self._stop_group: Any = _UNDECIDED  # None: no agreement (one process)
        self._stop_agreed = False

        # -- modules ------------------------------------------------------------------
        self._module_names: Dict[torch.nn.Module, str] = {}
        self._handles: List[Any] = []  # attached for the hook's life: the root's pre-hook
        # Forward hooks of submodules and the loss, gradient hooks of parameters:
        # attached only while steps save (see _sync_step_hooks).
        # Only those that can save something at the step's collections are
        # attached: (target, callback, the gradient's name or None).
        self._step_targets: List[Tuple[Any, Callable[..., Any], Optional[str]]] = []
        self._step_handles: Dict[int, Any] = {}  # index in _step_targets -> handle
        self._frozen: List[int] = []  # wanted, not attached: their parameter is frozen
        self._attached_for: Optional[FrozenSet[Collection]] = None  # the step collections attached for
        self._wanted: Dict[FrozenSet[Collection], FrozenSet[int]] = {}  # ... -> the targets they need
        self.has_registered_module = False
        self.has_registered_loss_module = False

        # -- the writer -----------------------------------------------------------------
        self._writer: Any = None
        self._sent_collections: Any = None  # what _send_collections stored last
        self._stop_poll: Optional[Callable[[], bool]] = None
        if not self.dry_run:
            _refuse_ended_trial(out_dir)
        # -- TensorBoard export (tensorboard.py): made with the writer, by rank 0 ------------
        self.tensorboard_dir: Optional[str] = None
        self._tensorboard: Any = None
        self._tensorboard_addr: Any = None
        if export_tensorboard or tensorboard_dir:
            from tensorkeep import _address

            from . import tensorboard

            addr = _address.parse(out_dir) if out_dir else None
            self.tensorboard_dir = tensorboard.resolve_dir(
                export_tensorboard, tensorboard_dir, addr.trial if addr else "dry_run"
            )
            if self.dry_run:
                logger.warning("tensorkeep: dry_run: nothing is saved, so nothing is exported to TensorBoard")
            else:
                self._tensorboard_addr = addr
        set_hook(self)
        _process_exit.install_exit_handlers()
        self._atexit = functools.partial(_close_at_exit, weakref.ref(self))
        atexit.register(self._atexit)
        if worker is not None or _dist_rank_and_size()[0] is not None:
            self._resolve_worker()

    def _resolve_worker(self) -> None:
        """Decides this process's worker name and the trial's num_workers, and makes
        the writer: at the first step (or should_stop/flush/close before it), when
        torch.distributed is initialised if it is going to be; at once when the
        worker is named or torch.distributed is initialised at Hook()."""
        if self._resolved:
            return
        self._resolved = True
        rank, world = _dist_rank_and_size()
        source = "torch.distributed"
        if rank is None:
            rank, world = _env_rank_and_size()
            source = "RANK/WORLD_SIZE"
        explicit_worker = self._worker_arg is not None
        if not explicit_worker:
            self.worker = f"worker_{rank}" if rank is not None else DEFAULT_WORKER_NAME
        num_workers = self._num_workers_arg
        if num_workers is None:
            num_workers = (world or 1) if self.include_workers == "all" else 1
        self.num_workers = int(num_workers)
        self._writes = explicit_worker or self.include_workers == "all" or self.worker == DEFAULT_WORKER_NAME
        if rank is not None:
            logger.info(
                "tensorkeep: rank %d of %s (%s): worker %s, num_workers %d",
                rank, world, source, self.worker, self.num_workers,
            )
        if self.dry_run:
            return
        if self._tensorboard_addr is not None and rank in (None, 0):
            from tensorkeep import _credentials

            from . import tensorboard

            addr = self._tensorboard_addr
            self._tensorboard = tensorboard.TensorBoardExport(
                addr.target, addr.trial, self.tensorboard_dir, _credentials.resolve()
            )
        if self._writes:
            self._writer = _make_writer(
                self.out_dir, self.worker, self.num_workers, max_stall_seconds=self.max_stall_seconds
            )
            # Every step the hook writes in ends at the next step's start (or
            # close): its writes go with the end_step, in one message.
            hold = getattr(self._writer, "_hold_writes_until_end_step", None)
            if hold is not None:
                hold()
            # The hook's exit handler must run before the writer's (atexit runs
            # the last registered first), so that it may end the training.
            atexit.unregister(self._atexit)
            atexit.register(self._atexit)
        else:
            logger.info(
                "tensorkeep: %s does not save (include_workers='one'); "
                "should_stop() still follows the trial", self.worker
            )

    # ------------------------------------------------------------------------------------
    # smdebug's public attributes
    # ------------------------------------------------------------------------------------
    @property
    def mode(self) -> Any:
        """The current mode (a member of ``tensorkeep.modes``)."""
        return self._client_mode

    @property
    def mode_steps(self) -> Dict[Any, int]:
        """The current step of each mode seen so far (-1 before its first step)."""
        return {client_mode(m): s for m, s in self._mode_steps.items()}

    @classmethod
    def create_from_json_file(cls, json_file_path: Optional[str] = None) -> "Hook":
        """A hook made from SageMaker's JSON hook configuration, as smdebug's:
        ``json_file_path``, else ``$SMDEBUG_CONFIG_FILE_PATH``, else
        ``/opt/ml/input/config/debughookconfig.json``. Its ``LocalPath`` is the
        trial's ``tensorkeep://`` URL (see ``tensorkeep.pytorch.json_config``).
        FileNotFoundError without the file; ValueError naming the file for a
        configuration that is not valid."""
        from . import json_config

        return json_config.create_hook(cls, json_file_path)

    def __repr__(self) -> str:
        return (
            f"<tensorkeep.pytorch.Hook out_dir={self.out_dir} worker={self.worker} "
            f"step={self.step} mode={self._client_mode} "
            f"include_collections={self.include_collections} save_config={self.save_config}>"
        )

    # ------------------------------------------------------------------------------------
    # Collections
    # ------------------------------------------------------------------------------------
    def get_collection(self, name: str, create: bool = True) -> Collection:
        """The collection called ``name`` (created if missing, unless create=False)."""
        return self.collection_manager.get(name, create=create)

    def get_collections(self) -> Dict[str, Collection]:
        return self.collection_manager.get_collections()

    def add_collection(self, collection: Collection) -> None:
        if not isinstance(collection, Collection):
            raise TypeError(
                f"collection must be an instance of tensorkeep.pytorch.Collection, "
                f"not {collection.__class__}"
            )
        self.collection_manager.add(collection)

    def _prepare_collections(self) -> None:
        """Decides the saved collections and fills in their configs (smdebug's
        ``_prepare_collections``). Runs before the first step and again whenever a
        collection changed."""
        cm = self.collection_manager
        for c in cm.collections.values():
            for m, (inc_in, inc_out) in list(c.modules.items()):
                key = (c.name, id(m), inc_in, inc_out)
                if key in self._resolved_modules:
                    continue
                mname = self._module_names.get(m)
                if mname is None:
                    self._warn_once(
                        ("module", key),
                        "tensorkeep: collection %r names a module that is not registered; "
                        "call register_module first", c.name,
                    )
                    continue
                if inc_in:
                    c.include("^" + _re_escape(mname) + self.INPUT_TENSOR_SUFFIX)
                if inc_out:
                    c.include("^" + _re_escape(mname) + self.OUTPUT_TENSOR_SUFFIX)
                self._resolved_modules.add(key)
        save_everything = CollectionKeys.ALL in self.include_collections
        for name in self.include_collections:
            if name not in cm.collections:
                self._warn_once(
                    ("unknown", name),
                    "tensorkeep: include_collections names %r, which is no collection; "
                    "create it with hook.get_collection(%r).include(regex)", name, name,
                )
        to_save: List[Collection] = []
        for name, c in cm.collections.items():
            if save_everything or name in self.include_collections:
                to_save.append(c)
        for name, c in cm.collections.items():
            if c.save_config is None:
                c.save_config = self.save_config
            else:
                c.save_config.merge_default_save_config(self.save_config)
            if name in SCALAR_COLLECTIONS:
                if c.reduction_config is None or not c.reduction_config.save_raw_tensor:
                    c.reduction_config = ReductionConfig(save_raw_tensor=True)
            elif c.reduction_config is None:
                c.reduction_config = self.reduction_config
        for c in to_save:
            if not c.include_regex and not c.tensor_names and not c.modules and c.name not in (
                CollectionKeys.ALL,
                CollectionKeys.DEFAULT,
            ):
                self._warn_once(
                    ("empty", c.name),
                    "tensorkeep: collection %r has no regex and no tensor names; it saves nothing",
                    c.name,
                )
        self._collections_to_save = to_save
        self._by_mode = {
            m: [(c, c.save_config.get_save_config(m)) for c in to_save] for m in (1, 2, 3, 4)
        }
        self._tensor_colls = {}
        self._plans = {}
        # The plans and callbacks of every set are made again; _step_colls
        # stays until the next step's are chosen (the last step's all-reduced
        # gradients are written after this, by _finish_step).
        self._plans_by_colls = {}
        self._plans_mode = -1
        self._wanted = {}
        self._attached_for = None
        self._cm_version = cm.version()
        self.prepared_collections = True
        self._send_collections()

    def _send_collections(self) -> None:
        """Stores the collections' configuration on the collector (PutCollections),
        when it changed since last sent: what a Trial's ``collections()`` shows
        (smdebug's collection files). A failure is logged; training goes on."""
        from tensorkeep import Writer

        if self._writer is None or self._disabled or not isinstance(self._writer, Writer):
            return
        from tensorkeep import _collection_wire

        colls = [self.collection_manager.collections[n] for n in sorted(self.collection_manager.collections)]
        sent = tuple(_collection_wire.to_proto(c).SerializeToString() for c in colls)
        if sent == self._sent_collections:
            return
        if _collection_wire.put_collections(self.out_dir, self.worker, colls):
            self._sent_collections = sent

    def _collections_of(self, tname: str) -> FrozenSet[Collection]:
        """The saved collections ``tname`` belongs to (cached)."""
        colls = self._tensor_colls.get(tname)
        if colls is None:
            colls = frozenset(c for c in self._collections_to_save if c.matches(tname))
            self._tensor_colls[tname] = colls
            for c in colls:
                if c.name not in (CollectionKeys.ALL,) and tname not in c.tensor_names:
                    # Record it like smdebug (Collection.tensor_names lists what was saved)
                    # without bumping the version: membership did not change.
                    c.tensor_names.add(tname)
        return colls

    def _compute_step_collections(self) -> None:
        mode = self._mode
        ms = self._mode_steps[mode]
        train_only_skip = mode == EVAL or mode == PREDICT
        sel = []
        mode_colls = [
            (c, scm) for c, scm in self._by_mode[mode]
            if not (train_only_skip and c.name in TRAIN_ONLY_COLLECTIONS)
        ]
        for c, scm in mode_colls:
            if ms >= 0 and scm.should_save_step(ms):
                sel.append(c)
        fs = frozenset(sel)
        if fs != self._step_colls or mode != self._plans_mode:
            self._step_colls = fs
            self._plans_mode = mode
            plans = self._plans_by_colls.get((mode, fs))
            if plans is None:
                if len(self._plans_by_colls) >= _PLAN_SETS:
                    self._plans_by_colls.clear()
                    self._wanted.clear()
                plans = self._plans_by_colls[(mode, fs)] = {}
            self._plans = plans
        self._saving = bool(fs) and not self._disabled and (self._writer is not None or self.dry_run)
        self._sync_step_hooks()
        self._quiet_mode = mode
        self._quiet_count = config_changes.count
        if fs or ms < 0:
            self._quiet_until = -1
        else:
            nexts = [n for n in (scm.next_save_step(ms + 1) for _, scm in mode_colls) if n is not None]
            self._quiet_until = min(nexts) if nexts else _NEVER

    def _sync_step_hooks(self) -> None:
        """Attaches the per-step callbacks while steps save, only those that
        can save something at the step's collections, and detaches them while
        steps do not: a registered hook costs a step even when it returns at
        once (PyTorch's slower module-call path, the autograd engine calling
        back into Python). At ``save_interval=100`` that was ~2-3 % of a 1 ms
        step; saving only the losses (the default), a forward hook on every
        submodule and a gradient hook on every parameter cost each saving step
        for nothing."""
        if not self._saving:
            if self._step_handles:
                self._detach_step_hooks()
            return
        colls = self._step_colls
        if self._attached_for is colls:
            if self._frozen:
                self._attach_unfrozen()
            return
        wanted = self._wanted.get(colls)
        if wanted is None:
            wanted = self._wanted[colls] = frozenset(
                i for i, t in enumerate(self._step_targets) if self._target_saves(t, colls)
            )
        handles = self._step_handles
        for i in [i for i in handles if i not in wanted]:
            self._detach(i)
        self._frozen = [i for i in wanted if i not in handles]
        self._attach_unfrozen()
        self._attached_for = colls

    def _attach_unfrozen(self) -> None:
        """Attaches the wanted callbacks in ``_frozen`` whose parameter
        requires grad (now); keeps the others there, for the next saving step
        (a layer fine-tuning unfreezes later)."""
        frozen = []
        for i in self._frozen:
            target, fn, _ = self._step_targets[i]
            handle = self._attach(target, fn)
            if handle is None:
                frozen.append(i)
            else:
                self._step_handles[i] = handle
        self._frozen = frozen

    def _target_saves(self, target: Tuple[Any, Callable[..., Any], Optional[str]], colls: FrozenSet[Collection]) -> bool:
        """Whether a step saving ``colls`` needs the callback ``target``: a
        parameter's if its gradient is in one of them; a module's if one of its
        inputs or outputs can be: one of a collection's tensor names, or
        numbered below _PROBED_IO for its regexes (a regex that picks only
        higher-numbered ones is not seen: see docs/python.md)."""
        obj, _, grad_name = target
        if grad_name is not None:
            return any(c.matches(grad_name) for c in colls)
        mname = self._module_names.get(obj)
        if mname is None:
            return False
        prefixes = (mname + self.INPUT_TENSOR_SUFFIX, mname + self.OUTPUT_TENSOR_SUFFIX)
        for c in colls:
            for n in c.tensor_names:
                if n.startswith(prefixes) and n[len(mname) :].split("_")[-1].isdigit():
                    return True
        return any(c.matches(p + str(i)) for p in prefixes for i in range(_PROBED_IO) for c in colls)

    def _detach(self, i: int) -> None:
        self._step_handles.pop(i).remove()
        target = self._step_targets[i][0]
        if isinstance(target, torch.Tensor):
            _drop_empty_tensor_hooks(target)

    def _detach_step_hooks(self) -> None:
        for i in list(self._step_handles):
            self._detach(i)
        self._frozen = []
        self._attached_for = None

    @staticmethod
    def _attach(target: Any, fn: Callable[..., Any]) -> Any:
        """The callback's handle; None for a parameter frozen now (PyTorch
        refuses a gradient hook on a tensor that does not require grad, and it
        has no gradient to save)."""
        if isinstance(target, torch.nn.Module):
            return target.register_forward_hook(fn)
        if not target.requires_grad:
            return None
        return target.register_hook(fn)

    def _add_step_target(self, target: Any, fn: Callable[..., Any], grad_name: Optional[str] = None) -> None:
        """Adds a per-step callback; the caller then calls _sync_step_hooks
        (once for a whole module: a step that saves attaches what it needs)."""
        self._step_targets.append((target, fn, grad_name))
        self._wanted = {}
        self._attached_for = None

    def _plan(self, tname: str) -> Any:
        """(save raw?, reductions, collection names, lane) for ``tname`` at
        this step, or _SKIP; the lane, when it saves the raw tensor alone, is
        the writer's function that writes it (Writer._array_writer)."""
        plan = self._plans.get(tname, 0)
        if plan != 0:
            return plan
        colls = self._collections_of(tname)
        save = colls & self._step_colls
        if not save:
            plan = _SKIP
        else:
            raw = False
            specs: List[Tuple[str, bool]] = []
            for c in sorted(save, key=lambda c: c.name):
                rc = c.reduction_config or self.reduction_config
                if rc.save_raw_tensor:
                    raw = True
                if c.name in SCALAR_COLLECTIONS:
                    continue
                for spec in rc.reduction_specs():
                    if spec not in specs:
                        specs.append(spec)
            if not raw and not specs:
                plan = _SKIP
            else:
                names = tuple(sorted(c.name for c in colls))
                lane = None
                if raw and not specs and hasattr(self._writer, "_array_writer"):
                    try:
                        lane = self._writer._array_writer(tname, self._client_mode, names)
                    except (TypeError, ValueError):
                        pass  # write_tensor says why, at each saving step (once in the log)
                plan = (raw, tuple(specs), names, lane)
        self._plans[tname] = plan
        return plan

    # ------------------------------------------------------------------------------------
    # Registration
    # ------------------------------------------------------------------------------------
    def register_module(self, module: torch.nn.Module) -> None:
        """Registers the model: its forward starts each step; its parameters, their
        gradients and its submodules' inputs and outputs can be saved."""
        if not isinstance(module, torch.nn.Module):
            raise ValueError(
                f"Module type {module.__class__.__name__} must be type torch.nn.Module"
            )
        self._check_open()
        # DistributedDataParallel / DataParallel: register the model they wrap, so
        # tensors have the plain model's names (Net_fc1.weight, not
        # DistributedDataParallel_module.fc1.weight); the wrapper's forward calls
        # the model's, which starts each step.
        wrapper = None
        if isinstance(module, _WRAPPERS):
            wrapper, module = module, module.module
        if self.gradients == "all_reduced" and wrapper is None:
            rank, world = _dist_rank_and_size()
            if world is not None and world > 1:
                raise ValueError(
                    "gradients='all_reduced' needs the DistributedDataParallel wrapper: "
                    "call register_module(ddp_model), not register_module(model)"
                )
        for name, sub in module.named_modules():
            if sub in self._module_names:
                raise ValueError(f"module {sub.__class__.__name__} ({name!r}) is registered twice")
        for name, sub in module.named_modules():
            self._module_names[sub] = name
        root_name = module._get_name()
        self._module_names[module] = root_name
        self._handles.append(module.register_forward_pre_hook(self.forward_pre_hook))
        for sub in module.modules():
            self._add_step_target(sub, self.forward_hook)
        if self.gradients == "all_reduced" and isinstance(wrapper, _DDP):
            self._register_reduced_gradients(wrapper, root_name)
        else:
            # Every parameter, frozen or not: a layer may be unfrozen later.
            for pname, param in module.named_parameters():
                gname = self.GRADIENT_PREFIX + root_name + "_" + pname
                self._add_step_target(param, self._backward_hook(gname), gname)
        self._sync_step_hooks()  # registered while a saving step runs: attach now
        self.has_registered_module = True

    def _register_reduced_gradients(self, ddp: Any, root_name: str) -> None:
        """Saves the gradients DDP all-reduced: a communication hook that runs DDP's
        default all-reduce (average over the ranks) and, on a saving step, copies
        each parameter's averaged gradient out of the bucket when the all-reduce
        completes. They are written on the training thread before the step ends."""
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        names = {
            id(p): self.GRADIENT_PREFIX + root_name + "_" + n
            for n, p in ddp.module.named_parameters()
            if p.requires_grad
        }

        # (No annotations: DDP compares them with dist.GradBucket, and this module's
        # `from __future__ import annotations` would make them strings.)
        def comm_hook(state, bucket):  # type: ignore[no-untyped-def]
            fut = default_hooks.allreduce_hook(state, bucket)
            if not self._saving:
                return fut
            step = self.step

            def copy_out(f: Any) -> Any:
                buf = f.value()
                try:
                    for p, g in zip(bucket.parameters(), bucket.gradients()):
                        tname = names.get(id(p))
                        if tname is not None:
                            self._reduced.append((tname, g.detach().clone(), step))
                except Exception:  # noqa: BLE001 - never break DDP's backward
                    logger.exception("tensorkeep: copying all-reduced gradients failed")
                return buf

            return fut.then(copy_out)

        try:
            ddp.register_comm_hook(None, comm_hook)
        except RuntimeError as e:
            raise ValueError(
                f"gradients='all_reduced' registers a DDP communication hook, and DDP refused it "
                f"({e}); use gradients='local' with a communication hook of your own"
            ) from e

    def _write_reduced(self) -> None:
        """Writes the all-reduced gradients of the current step (training thread)."""
        done, self._reduced = self._reduced, []
        for tname, value, step in done:
            if step == self.step and self._saving and tname not in self._grads_done:
                self._grads_done.add(tname)
                self._save_for_tensor(tname, value)

    def register_hook(self, module: torch.nn.Module) -> None:
        """Alias of ``register_module`` (smdebug keeps it for compatibility)."""
        self.register_module(module)

    def register_loss(self, loss_module: torch.nn.Module) -> None:
        """Registers the loss module (e.g. ``nn.CrossEntropyLoss()``): its output is
        saved as ``<LossClass>_output_0`` in the ``losses`` collection."""
        if not isinstance(loss_module, torch.nn.Module):
            raise TypeError(
                f"loss_module={loss_module!r} must be a torch.nn.Module such as nn.CrossEntropyLoss()"
            )
        self._check_open()
        if loss_module in self._module_names:
            raise ValueError(f"loss module {loss_module._get_name()} is registered twice")
        self._module_names[loss_module] = loss_module._get_name()
        self._add_step_target(loss_module, self.forward_hook)
        self._sync_step_hooks()
        self.has_registered_loss_module = True

    # ------------------------------------------------------------------------------------
    # Modes and steps
    # ------------------------------------------------------------------------------------
    def set_mode(self, mode: Any) -> None:
        """Sets the mode (``modes.TRAIN``, ``EVAL``, ``PREDICT`` or ``GLOBAL``). The next
        forward of the registered module starts the next step of that mode."""
        v = mode_value(mode)
        self._mode = v
        self._client_mode = client_mode(v)
        if v not in self._mode_steps:
            self._mode_steps[v] = -1
        if self.prepared_collections:
            self._compute_step_collections()

    def _start_step(self) -> None:
        if not self._resolved:
            self._resolve_worker()
        if not self.prepared_collections or self._cm_version != self.collection_manager.version():
            self._prepare_collections()
        self._finish_step()
        self.step += 1
        mode = self._mode
        self._mode_steps[mode] += 1
        if mode != GLOBAL:
            self._mode_steps[GLOBAL] = self.step
        self._compute_step_collections()
        if self._saving:
            self._io_counts.clear()
            self._grads_done.clear()
        if self._pending or self._scalar_cache:
            self._write_deferred()

    def _finish_step(self) -> None:
        """Writes the step's scalars and tells the collector the step is complete."""
        if self.step < 0:
            return
        if self._reduced:
            self._write_reduced()
        if self._scalar_cache:
            self._flush_scalars()
        if self._wrote_step:
            self._wrote_step = False
            if self._writer is not None and not self._disabled:
                try:
                    self._writer.end_step(self.step)
                except Exception as e:  # noqa: BLE001 - never break the training loop
                    self._fail(e)

    # ------------------------------------------------------------------------------------
    # PyTorch callbacks (hot path: return at once when this step saves nothing)
    # ------------------------------------------------------------------------------------
    def forward_pre_hook(self, module: torch.nn.Module, inputs: Any) -> None:
        if self._closed:
            return
        mode = self._mode
        ms = self._mode_steps[mode] + 1
        if (
            ms < self._quiet_until
            and mode == self._quiet_mode
            and config_changes.count == self._quiet_count
            and self.prepared_collections  # False: the script asks to prepare again
            and not (self._wrote_step or self._scalar_cache or self._pending or self._reduced)
        ):
            # A step in the quiet stretch _compute_step_collections found (no
            # collection saves before _quiet_until, nothing changed since,
            # nothing to finish): counted, and nothing else (~1 us instead of
            # ~8 asking every collection's save config, at save_interval=100
            # ~1 % of the 0.8 ms step).
            self.step += 1
            self._mode_steps[mode] = ms
            if mode != GLOBAL:
                self._mode_steps[GLOBAL] = self.step
            return
        self._start_step()
        if self._saving:
            # The parameters as they are now (a submodule replaced or added
            # after register_module, weight_norm, parametrizations).
            root = self._module_names.get(module, module._get_name()) + "_"
            plans = self._plans
            for pname, param in module.named_parameters():
                tname = root + pname
                if plans.get(tname, 0) is not _SKIP:
                    self._save_for_tensor(tname, param)

    def forward_hook(self, module: torch.nn.Module, inputs: Any, outputs: Any) -> None:
        if not self._saving:
            return
        name = self._module_names.get(module)
        if name is None:
            return
        self._write_io(name, self.INPUT_TENSOR_SUFFIX, inputs)
        self._write_io(name, self.OUTPUT_TENSOR_SUFFIX, outputs)

    def _backward_hook(self, tname: str) -> Callable[[torch.Tensor], None]:
        def back(grad: torch.Tensor) -> None:
            if self._saving and grad is not None and tname not in self._grads_done:
                # A second backward in the same step (gradient accumulation) keeps the first.
                self._grads_done.add(tname)
                self._save_for_tensor(tname, grad)

        return back

    def record_tensor_value(self, tensor_name: str, tensor_value: torch.Tensor) -> None:
        """Saves ``tensor_value`` as ``<tensor_name>_output_<i>`` (for functional losses
        such as ``F.cross_entropy``: ``record_tensor_value("loss", loss)`` lands in
        ``losses``)."""
        if not isinstance(tensor_value, torch.Tensor):
            raise TypeError(f"tensor_value={tensor_value!r} must be a torch.Tensor")
        if self._saving:
            self._write_io(tensor_name, self.OUTPUT_TENSOR_SUFFIX, tensor_value)

    def _write_io(self, name: str, suffix: str, var: Any) -> None:
        key = name + suffix
        idx = self._io_counts.get(key, 0)
        self._io_counts[key] = self._write_nested(key, var, idx)

    def _write_nested(self, prefix: str, var: Any, idx: int) -> int:
        # Hot path: every registered module's inputs and outputs come here
        # twice a saving step, and most are in no saved collection. A plain
        # tensor's plan is looked up here, without a call of
        # _save_for_tensor, and a tuple's plain tensors without a call of
        # this method each (1.19 -> 0.53 us for a one-tensor tuple, timeit).
        if isinstance(var, torch.Tensor):
            tname = prefix + str(idx)
            if self._plans.get(tname, 0) is not _SKIP:
                self._save_for_tensor(tname, var)
            return idx + 1
        if isinstance(var, (tuple, list)):
            plans = self._plans
            for v in var:
                if v.__class__ is torch.Tensor:
                    tname = prefix + str(idx)
                    if plans.get(tname, 0) is not _SKIP:
                        self._save_for_tensor(tname, v)
                    idx += 1
                else:
                    idx = self._write_nested(prefix, v, idx)
        return idx

    # ------------------------------------------------------------------------------------
    # User-saved values
    # ------------------------------------------------------------------------------------
    def save_scalar(self, name: str, value: Any, sm_metric: bool = False, timestamp: Optional[float] = None) -> None:
        """Saves a scalar as ``scalar/<name>`` at the current step (whatever the save
        config says, as smdebug does). It is written when the step ends; saved twice
        in one step, the last value wins. ``sm_metric`` and ``timestamp`` are accepted
        for compatibility and ignored."""
        tname = self.SCALAR_PREFIX + str(name)
        if isinstance(value, torch.Tensor):
            val = value.detach().cpu()
            if val.dtype == torch.bfloat16:
                val = val.float()
            arr: Any = np.array(val.numpy(), copy=True)
            size, kind = arr.size, arr.dtype.kind
        elif np.isscalar(value):
            # smdebug's make_numpy_array: a Python or numpy number is saved as a
            # one-element array (a float as float64 of shape (1,)).
            arr = np.array([value])
            size, kind = arr.size, arr.dtype.kind
        else:
            arr = np.array(value, copy=True)
            size, kind = arr.size, arr.dtype.kind
        if size != 1:
            raise TypeError(f"{tname} has non scalar value of type: {type(value)}")
        if kind not in "biufc":
            raise TypeError(f"{tname}: value {value!r} is not a number")
        self._check_open()
        self._scalar_cache[tname] = (arr, self.step, self._mode, self._mode_steps[self._mode])

    def save_tensor(self, tensor_name: str, tensor_value: Any, collections_to_write: Union[str, Iterable[str]] = "default") -> None:
        """Saves ``tensor_value`` (torch tensor, numpy array or number) as ``tensor_name``
        in the given collections, at the current step if the save config of one of
        them selects it (before the first step: at step 0). The collections are saved
        even when not in ``include_collections``, since they were asked for here."""
        if isinstance(collections_to_write, str):
            collections_to_write = [collections_to_write]
        names = list(collections_to_write)
        if not names:
            raise ValueError("collections_to_write must name at least one collection")
        self._check_open()
        for cn in names:
            c = self.collection_manager.get(cn)
            c.add_tensor_name(tensor_name)
            if cn not in self.include_collections:
                self.include_collections.append(cn)
        if self.step < 0:
            self._pending.append((tensor_name, _copy_value(tensor_value), tuple(names)))
            return
        if self._cm_version != self.collection_manager.version() or not self.prepared_collections:
            self._prepare_collections()
            self._compute_step_collections()
        if self._saving:
            self._save_for_tensor(tensor_name, tensor_value)

    def _write_deferred(self) -> None:
        if self._scalar_cache:
            # Scalars saved before the first step belong to step 0.
            for k, (arr, st, m, ms) in list(self._scalar_cache.items()):
                if st < 0:
                    self._scalar_cache[k] = (arr, self.step, self._mode, self._mode_steps[self._mode])
        if self._pending:
            pending, self._pending = self._pending, []
            if self._saving:
                for tname, value, _ in pending:
                    self._save_for_tensor(tname, value)

    def _flush_scalars(self) -> None:
        cache, self._scalar_cache = self._scalar_cache, {}
        if self._writer is None or self._disabled:
            return
        for tname, (arr, st, m, ms) in cache.items():
            if st < 0:
                st, m, ms = 0, self._mode, 0
            # The collections whose regexes match it (with save_all, "all": smdebug's
            # trial finds scalars in collection "all" through its ".*").
            colls = tuple(
                c.name for c in self.collection_manager.collections.values() if c.matches(tname)
            )
            try:
                self._writer.write_tensor(
                    tname, arr, step=st, mode=client_mode(m), mode_step=ms,
                    collections=colls, reductions=None,
                )
                if st == self.step:
                    self._wrote_step = True
            except (TypeError, ValueError) as e:
                self._warn_once(("scalar", tname), "tensorkeep: cannot save %s: %s", tname, e)
            except Exception as e:  # noqa: BLE001
                self._fail(e)
                return

    # ------------------------------------------------------------------------------------
    # Writing one tensor
    # ------------------------------------------------------------------------------------
    def _save_for_tensor(self, tname: str, value: Any) -> None:
        plan = self._plans.get(tname, 0)
        if plan == 0:
            plan = self._plan(tname)
        if plan is _SKIP:
            return
        raw, specs, colls, lane = plan
        arr = None
        if raw and not specs and value.__class__ in _PLAIN_TENSORS:
            # The usual case, a CPU tensor saved whole: its numpy view at once
            # (numpy() refuses what needs the slow path: sparse, bfloat16;
            # force=True copies another device's to the host, and resolves a
            # conjugate or negative view, as the slow path would).
            try:
                arr = value.numpy(force=True) if _NUMPY_FORCE else value.detach().numpy()
            except (TypeError, RuntimeError):
                pass
            else:
                if arr.dtype not in _NATIVE_DTYPES:  # complex, ...: the slow path says why
                    arr = None
        reds = None
        if arr is None:
            try:
                t = _as_cpu_tensor(value)
                arr = _to_numpy(t) if raw else None
                reds = _reductions(t, specs) if specs else None
            except (TypeError, ValueError, RuntimeError) as e:
                self._warn_once(("convert", tname), "tensorkeep: cannot save %s: %s", tname, e)
                return
            if reds is None and arr is None:
                return
        if self._writer is None:  # dry run
            return
        try:
            if lane is not None:
                lane(arr, self.step, self._mode_steps[self._mode])
            else:
                self._writer.write_tensor(
                    tname, arr, step=self.step, mode=self._client_mode,
                    mode_step=self._mode_steps[self._mode], collections=colls, reductions=reds,
                )
        except (TypeError, ValueError) as e:
            self._warn_once(("write", tname), "tensorkeep: cannot save %s: %s", tname, e)
            return
        except Exception as e:  # noqa: BLE001 - never break the training loop
            self._fail(e)
            return
        self._wrote_step = True

    def _fail(self, e: BaseException) -> None:
        """smdebug's behaviour on an internal error: log it and stop saving, never
        break the training loop. A Conflict (this run rewrites steps a run saved
        before into the same trial) is raised instead: training on would save
        nothing, so the script stops at once with the collector's message."""
        from tensorkeep.exceptions import Conflict

        if isinstance(e, Conflict):
            self._disabled = True
            self._saving = False
            raise e
        logger.error("tensorkeep: saving failed (%s: %s); the hook stops saving", type(e).__name__, e)
        self._disabled = True
        self._saving = False

    def _warn_once(self, key: Any, msg: str, *args: Any) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning(msg, *args)

    # ------------------------------------------------------------------------------------
    # Stop requests, flush, close
    # ------------------------------------------------------------------------------------
    def should_stop(self) -> bool:
        """True once a rule with the "stop" action fired for this trial: the training
        loop should end (and call ``close()``).

        Under torch.distributed (initialised, world size > 1) this is a collective:
        the ranks agree (an all-reduce of one flag over gloo), so that every rank
        returns True at the same call and they all leave the loop at the same
        step. Call it on every rank at the same point of each iteration, as in
        ``if hook.should_stop(): break``; once it returned True it returns True
        without communicating. If the agreement fails (a rank died), it warns
        once and answers for this rank alone from then on."""
        if not self._resolved and not self._closed:
            self._resolve_worker()
        if self._stop_agreed:
            return True
        if self._stop_group is _UNDECIDED:
            try:
                self._stop_group = _dist_group_for_stop()
            except Exception as e:  # noqa: BLE001
                logger.warning("tensorkeep: should_stop() cannot agree across ranks: %s", e)
                self._stop_group = None
        if self._stop_group is None:
            self._stop_agreed = self._local_stop()
            return self._stop_agreed
        # A rank that does not save asks no collector: a writing rank's flag
        # reaches it through the all-reduce.
        local = bool(self._writer.stop_requested) if self._writer is not None else False
        try:
            flag = torch.tensor([1 if local else 0], dtype=torch.int32)
            torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX, group=self._stop_group)
            self._stop_agreed = bool(flag.item())
        except Exception as e:  # noqa: BLE001 - a dead rank: answer alone
            logger.warning(
                "tensorkeep: should_stop() could not agree with the other ranks (%s); "
                "it answers for %s alone from now on", e, self.worker,
            )
            self._stop_group = None
            self._stop_agreed = self._local_stop()
        return self._stop_agreed

    def _local_stop(self) -> bool:
        if self._writer is not None:
            return bool(self._writer.stop_requested)
        if self.dry_run or self.out_dir is None:
            return False
        if self._stop_poll is None:
            self._stop_poll = _StopPoller(self.out_dir)
        return self._stop_poll()

    def flush(self) -> None:
        """Returns when everything saved so far is durable on the collector
        (a tensorkeep addition; smdebug has no equivalent). Scalars of the current
        step are written when the step ends."""
        if not self._resolved and not self._closed:
            self._resolve_worker()
        if self._reduced:
            self._write_reduced()
        if self._writer is not None and not self._disabled:
            self._writer.flush()

    def close(self, timeout: Optional[float] = None) -> None:
        """Writes what is pending, ends this worker's part of the trial
        (end_of_training) and detaches the hook from the model. Returns once the
        collector has everything (or after ``timeout`` seconds, raising WaitTimeout).
        A hook not closed by the script is closed at interpreter exit: with end of
        training if the script ended normally, without it after an uncaught
        exception or SIGTERM (the collector then makes the worker LOST after its
        --worker-timeout, unless a restarted process comes back as it)."""
        self._close(end_of_training=True, timeout=timeout)

    def _close(self, end_of_training: bool, timeout: Optional[float]) -> None:
        if self._closed:
            return
        if not self._resolved:
            self._resolve_worker()
        if self._reduced:
            self._write_reduced()
        self._closed = True
        self._saving = False
        for h in self._handles:
            try:
                h.remove()
            except Exception:  # pragma: no cover
                pass
        self._handles = []
        self._detach_step_hooks()
        self._step_targets = []
        if self._writer is not None:
            try:
                if not self._disabled:
                    if self._pending and self.step < 0:
                        logger.warning(
                            "tensorkeep: save_tensor values from before the first step were never saved"
                        )
                    if self._scalar_cache:
                        self._flush_scalars()
                    if self.prepared_collections:
                        self._send_collections()  # changed since the last step?
            finally:
                try:
                    self._writer.close(end_of_training=end_of_training, timeout=timeout)
                finally:
                    if self._tensorboard is not None:
                        self._tensorboard.close(
                            trial_ends=end_of_training and self.num_workers == 1, timeout=timeout
                        )
        elif self._tensorboard is not None:
            self._tensorboard.close(trial_ends=False, timeout=timeout)
        if self._stop_poll is not None:
            self._stop_poll.close()
        if get_hook() is self:
            del_hook()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the hook is closed")


_DDP = torch.nn.parallel.DistributedDataParallel
_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


def _numpy_takes_force() -> bool:
    """Whether this PyTorch has ``Tensor.numpy(force=True)`` (1.13 on), which
    detaches in C++: ~1 us a tensor less than ``detach().numpy()``."""
    try:
        torch.zeros(1, requires_grad=True).numpy(force=True)
    except TypeError:
        return False
    return True


_NUMPY_FORCE = _numpy_takes_force()


def _drop_empty_tensor_hooks(t: torch.Tensor) -> None:
    """After removing our gradient hook from ``t``: if no hook of anyone is
    left, unset its hook dict. Removing a tensor's last hook leaves an empty
    dict that the autograd engine still calls into Python for at every
    backward (~1 us a parameter here, measured by alternating a model whose
    parameters had a hook removed with a fresh copy: 102.4 against 98.7 us a
    backward of 4 parameters; with the dict unset, 98.3): a cost on every step
    that saves nothing, growing with the model's parameters."""
    hooks = getattr(t, "_backward_hooks", None)
    if hooks is not None and len(hooks) == 0 and t.is_leaf:  # (a non-leaf's dict is also on its grad_fn)
        t._backward_hooks = None
_WRAPPERS = (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)
