"""selfplay: train, resume, evaluate and inspect self-play curriculum runs.

A challenger model proposes tasks at the solver's frontier; both are trained by GRPO.
Each run lives in one directory: config.yaml, metrics.jsonl, tasks/ and checkpoints/.
Config keys are set in a YAML file and overridden as dotted key=value arguments.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import logging
import os
import re
import sys
import warnings
from pathlib import Path

# Before anything can import torch: libgomp reads this once, when torch loads it. Its default
# busy-waits between parallel regions, so a CPU run sharing the machine with another CPU job
# crawls (a demo round beside one CPU hog: 86-238 s with the default, 14-17 s with PASSIVE;
# scripts/bench_threads.py, BENCHMARKS.md). The user's own setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from curriculum.config import Config, ConfigError, diff_keys, is_resumable, key_specs, load_config  # noqa: E402
from curriculum.errors import UsageError  # noqa: E402
from curriculum.rundir import RunDir, run_status  # noqa: E402

EXAMPLES = """\
examples:
  selfplay train configs/demo_cpu.yaml train.rounds=4 --run-dir runs/try
  selfplay validate configs/demo_cpu.yaml model.lora.enabled=true
  selfplay train --resume runs/try train.rounds=8
  selfplay status
  selfplay eval runs/try
  selfplay export runs/try --out models/try-solver
  selfplay dashboard runs/try --serve
  selfplay model get smollm2-135m-instruct

`selfplay COMMAND --help` describes a command's arguments.
"""


def _version() -> str:
    try:
        return importlib.metadata.version("selfplay-curriculum")
    except importlib.metadata.PackageNotFoundError:  # a checkout run through PYTHONPATH, not installed
        pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
        return re.search(r'^version = "([^"]+)"', pyproject, flags=re.M).group(1)


def _quiet_deepspeed_on_cpu(cfg: Config) -> None:
    """Name DeepSpeed's accelerator on a CPU run, so that it does not guess aloud.

    accelerate imports deepspeed whenever it is installed (``save_pretrained`` unwraps models
    through it), even for runs with distributed.engine=torch; on a machine without a GPU its
    auto-detection prints "Setting accelerator to CPU. If you have GPU or other accelerator,
    we were unable to detect it." A user's own DS_ACCELERATOR wins.
    """
    import torch

    if cfg.run.device == "cpu" or not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")


def _train_config(args) -> tuple[Config, list[str]]:
    """The config `train` runs with, and the keys a resume changes. Writes nothing."""
    overrides = list(args.overrides)
    if not args.resume:
        if not args.config:
            raise ConfigError("train needs CONFIG.yaml (or --resume RUN_DIR)")
        if args.run_dir:
            overrides.append(f"run.dir={args.run_dir}")
        return load_config(args.config, overrides), []
    run_dir = RunDir(args.resume)
    if args.config and "=" in args.config:  # `train --resume DIR key=value`
        overrides.insert(0, args.config)
    if not run_dir.is_run():
        raise ConfigError(f"{run_dir.path} has no config.yaml; is it a run directory?")
    old = load_config(run_dir.config)
    cfg = load_config(run_dir.config, overrides + [f"run.dir={run_dir.path}"])
    changed = list(diff_keys(old, cfg))
    refused = [k for k in changed if not is_resumable(k)]
    if refused:
        raise ConfigError(f"these keys cannot change on resume (they would break the run): {', '.join(refused)}")
    return cfg, changed


def _train(args) -> int:
    cfg, changed = _train_config(args)
    if args.dry_run:
        _print_summary(cfg, bool(args.resume), changed)
        return 0
    _quiet_deepspeed_on_cpu(cfg)
    from curriculum.trainer import SelfPlayTrainer

    trainer = SelfPlayTrainer(cfg, resume=bool(args.resume))
    try:
        trainer.train()
    finally:
        trainer.close()
    if trainer.dist.is_main:
        print(f"metrics: {Path(cfg.run.dir) / 'metrics.jsonl'}")
    return 0


def _print_summary(cfg: Config, resume: bool, changed: list[str]) -> None:
    """What `validate` / `train --dry-run` reports for a valid config."""
    run_dir = str(cfg.run.dir)
    if resume:
        run_dir += f" (resume; changing {', '.join(changed)})" if changed else " (resume; no key changes)"
    elif RunDir(cfg.run.dir).has_checkpoints():
        run_dir += " (holds a run already: train refuses it, train --resume continues it)"
    t = cfg.model.tiny
    model = cfg.model.path + (f"@{cfg.model.revision}" if cfg.model.revision else "") or \
        f"embedded tiny ({t.layers} layers, hidden {t.hidden_size}, {t.heads} heads)"
    lora = f", LoRA r={cfg.model.lora.r}" if cfg.model.lora.enabled else ""
    kwargs = ", ".join(f"{k}={v}" for k, v in cfg.env.kwargs.items())
    print("config OK")
    print(_table([["  run dir:", run_dir],
                  ["  env:", f"{cfg.env.name}({kwargs})"],
                  ["  mode:", cfg.curriculum.mode],
                  ["  rounds:", str(cfg.train.rounds)],
                  ["  model:", f"{model}, {cfg.model.dtype}{lora}"],
                  ["  engine:", f"{cfg.distributed.engine} on {cfg.run.device}"]]))


def _eval(args) -> int:
    from curriculum.evaluate import evaluate_run

    results = evaluate_run(Path(args.run_dir))
    print(json.dumps(results, indent=1))
    return 0


def _export(args) -> int:
    from curriculum.export import export_role

    os.environ.setdefault("DS_ACCELERATOR", "cpu")  # export runs on the CPU: deepspeed need not guess aloud
    print(export_role(Path(args.run_dir), args.role, Path(args.out), args.merge, args.checkpoint))
    return 0


def _status(args) -> int:
    for d in args.run_dirs:
        if not RunDir(d).is_run():
            raise FileNotFoundError(f"{d} has no config.yaml; is it a run directory?")
    dirs = [Path(d) for d in args.run_dirs] or sorted(p.parent for p in Path(args.root).glob("*/config.yaml"))
    if not dirs:
        # With --json, stdout stays a stream of JSON lines (here: none).
        print(f"no runs under {args.root} (a run directory holds config.yaml)",
              file=sys.stderr if args.json else sys.stdout)
        return 0
    statuses = [run_status(d) for d in dirs]
    if args.json:
        for s in statuses:
            print(json.dumps(s))
    else:
        print(_table([["RUN", "STATE", "ROUND", "CHECKPOINT", "ALARMS", "INFO"], *map(_status_row, statuses)]))
    return 0


def _status_row(s: dict) -> list[str]:
    """One row of the status table; INFO is who trains a running run, or why a run is invalid."""
    reached = f"{s['round']}/{s['rounds']}" if "round" in s else "-"
    checkpoint = Path(s["checkpoint"]).name if s.get("checkpoint") else "-"
    info = f"{s['pid']}@{s['host']}" if s["state"] == "running" else s.get("error", "")
    if s.get("stop_reason"):
        info = (info + "; " if info else "") + s["stop_reason"].split(" (", 1)[0]
    return [s["run"], s["state"], reached, checkpoint, ",".join(s.get("alarms", [])) or "-", info]


def _table(rows: list[list[str]]) -> str:
    """Rows as left-aligned columns, two spaces apart."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


def _dashboard(args) -> int:
    from curriculum import dashboard

    run_dirs = [Path(d) for d in args.run_dirs]
    for run_dir in run_dirs:
        if not (run_dir / "config.yaml").is_file():
            raise FileNotFoundError(f"{run_dir} has no config.yaml; is it a run directory?")
    if not args.serve:
        print(dashboard.write(run_dirs, args.out))
        return 0
    try:
        server = dashboard.serve(run_dirs, args.port, args.host)
    except RuntimeError as exc:  # a busy port, an address we cannot bind: said in one line
        print(f"selfplay: {exc}", file=sys.stderr)
        return 2
    what = run_dirs[0] if len(run_dirs) == 1 else f"{len(run_dirs)} runs"
    print(f"dashboard of {what} at http://{args.host}:{server.server_address[1]}/ (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def _as_override(value) -> str:
    """A default as one would write it in key=value (YAML)."""
    if isinstance(value, str) and value.isprintable():
        return value or '""'
    return json.dumps(value)  # a string with a newline or tab too: one line, double-quoted (valid YAML)


def _keys(args) -> int:
    rows = [[key, spec.type, _as_override(spec.default), spec.doc] for key, spec in key_specs().items()]
    if args.plain:
        for row in rows:
            print("\t".join(row))
    else:
        print(_table([["KEY", "TYPE", "DEFAULT", "MEANING"], *rows]))
    return 0


def _model(args) -> int:
    from curriculum.models import get_model

    print(get_model(args.name))  # the last line: `model.path=$(selfplay model get NAME | tail -1)`
    return 0


def _model_warmup(args) -> int:
    from curriculum.config import load_config
    from curriculum.sft import Settings, warm_up_pretrained

    cfg = load_config(args.config, args.overrides)
    s = Settings(steps=args.steps, batch_size=args.batch_size, lr=args.lr, max_level=args.max_level, seed=cfg.run.seed)
    if cfg.run.threads > 0:
        import torch

        torch.set_num_threads(cfg.run.threads)
    print(warm_up_pretrained(cfg, s, progress=cfg.log.progress))  # the last line, as `model get`'s
    return 0


def _add_train_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. train.rounds=4")
    p.add_argument("--run-dir", help="same as run.dir=...")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="selfplay", description=__doc__, epilog=EXAMPLES,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"selfplay {_version()}")
    sub = p.add_subparsers(dest="command", required=True, title="commands", metavar="COMMAND")
    t = sub.add_parser("train", help="train from a config, or resume a run (--resume RUN_DIR)")
    t.add_argument("config", nargs="?", metavar="CONFIG.yaml", help="YAML config (omit with --resume)")
    _add_train_args(t)
    t.add_argument("--resume", metavar="RUN_DIR", help="continue from the newest complete checkpoint")
    t.add_argument("--dry-run", action="store_true", help="check the config and stop (same as validate)")
    t.set_defaults(fn=_train)
    v = sub.add_parser("validate", help="check a config and summarize it, without building a model")
    v.add_argument("config", metavar="CONFIG.yaml")
    _add_train_args(v)
    v.set_defaults(fn=_train, resume=None, dry_run=True)
    e = sub.add_parser("eval", help="score a run's latest checkpoint on the held-out benchmark")
    e.add_argument("run_dir", metavar="RUN_DIR")
    e.set_defaults(fn=_eval)
    x = sub.add_parser("export", help="write a checkpoint's solver or challenger as a Hugging Face model directory")
    x.add_argument("run_dir", metavar="RUN_DIR")
    x.add_argument("--role", default="solver", help="solver (default) or challenger")
    x.add_argument("--out", required=True, metavar="DIR", help="where to write it: a new or empty directory")
    x.add_argument("--merge", action="store_true",
                   help="LoRA runs: merge the adapter into its base (a plain model); without it, a peft adapter directory")
    x.add_argument("--checkpoint", metavar="NAME", help="e.g. round_0003 (default: the newest intact one)")
    x.set_defaults(fn=_export)
    s = sub.add_parser("status", help="state, round and newest checkpoint of runs")
    s.add_argument("run_dirs", nargs="*", metavar="RUN_DIR", help="runs to show (default: every run under --root)")
    s.add_argument("--root", default="runs", help="where to look when no run is named (default: runs)")
    s.add_argument("--json", action="store_true", help="one JSON object per run and line")
    s.set_defaults(fn=_status)
    d = sub.add_parser("dashboard", help="write or serve the HTML dashboard of a run, or compare runs")
    d.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="one run, or several to compare")
    d.add_argument("--out", help="where to write the page (default RUN_DIR/dashboard.html; compare.html for several)")
    d.add_argument("--serve", action="store_true", help="serve the page, rebuilt on every request")
    d.add_argument("--port", type=int, default=8000)
    d.add_argument("--host", default="127.0.0.1", help="address to bind (default: this machine only)")
    d.set_defaults(fn=_dashboard)
    k = sub.add_parser("config-keys", help="every config key with its type, default and meaning")
    k.add_argument("--plain", action="store_true", help="tab-separated key, type, default, meaning; no header")
    k.set_defaults(fn=_keys)
    m = sub.add_parser("model", help="get a known pretrained model, or warm one up on an environment's generator")
    actions = m.add_subparsers(dest="action", required=True, metavar="ACTION")
    g = actions.add_parser("get", help="`model get smollm2-135m-instruct` prints its cached directory")
    g.add_argument("name", metavar="NAME", help="smollm2-135m-instruct")
    g.set_defaults(fn=_model)
    w = actions.add_parser("warmup", help="supervised steps of model.path on the config's generator problems, "
                                          "in the solver's prompt; prints the warmed-up model's directory")
    w.add_argument("config", metavar="CONFIG.yaml")
    w.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. env.kwargs.num_levels=3")
    w.add_argument("--steps", type=int, default=60)
    w.add_argument("--batch-size", type=int, default=8)
    w.add_argument("--lr", type=float, default=5e-4)
    w.add_argument("--max-level", type=int, default=0, help="teach levels 1..N (default: every level)")
    w.set_defaults(fn=_model_warmup)
    return p


def _parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """parse_args, also taking key=value overrides that follow an option (`train CONFIG --dry-run a.b=1`)."""
    args, extra = parser.parse_known_args(argv)
    if extra and hasattr(args, "overrides") and all("=" in a and not a.startswith("-") for a in extra):
        args.overrides += extra
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: list[str] | None = None) -> int:
    rank = int(os.environ.get("RANK", "0"))  # set by torchrun / the deepspeed launcher
    logging.basicConfig(level=logging.INFO if rank == 0 else logging.WARNING,
                        format=f"%(asctime)s %(levelname)s %(name)s{f' [rank {rank}]' if rank else ''}: %(message)s")
    for noisy in ("httpx", "wandb", "transformers", "torch.distributed", "DeepSpeed", "deepspeed"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # peft's get_peft_model reads model.is_gradient_checkpointing, deprecated by transformers 5:
    # their call, not ours, and nothing a user can act on.
    warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning,
                            module=r"transformers\.modeling_utils")
    args = _parse(build_parser(), argv)
    try:
        return args.fn(args)
    except BrokenPipeError:  # `selfplay config-keys | head`: the reader left; not an error of ours
        sys.stdout = None
        return 0
    except ConfigError as exc:
        print(f"selfplay: config error: {' '.join(str(exc).splitlines())}", file=sys.stderr)  # one line, always
        return 2
    except UsageError as exc:
        print(f"selfplay: {exc}", file=sys.stderr)
        return 2
    except FileNotFoundError as exc:
        print(f"selfplay: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        if exc.filename is None:  # not about a path: unexpected, a bug to see in full
            raise
        # A run directory under a read-only one, a full disk (DiskFullError says how full): the path
        # and the reason are all there is to say.
        print(f"selfplay: cannot write {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
