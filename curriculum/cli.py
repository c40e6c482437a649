"""``selfplay``: train, resume, evaluate and inspect runs."""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from curriculum.checkpoint import atomic_write
from curriculum.config import ConfigError, diff_keys, is_resumable, load_config, to_yaml, valid_keys


def _train(args) -> int:
    overrides = list(args.overrides)
    if args.resume:
        run_dir = Path(args.resume)
        if args.config and "=" in args.config:  # `train --resume DIR key=value`
            overrides.insert(0, args.config)
        saved = run_dir / "config.yaml"
        if not saved.is_file():
            raise ConfigError(f"{run_dir} has no config.yaml; is it a run directory?")
        old = load_config(saved)
        cfg = load_config(saved, overrides + [f"run.dir={run_dir}"])
        changed = diff_keys(old, cfg)
        refused = [k for k in changed if not is_resumable(k)]
        if refused:
            raise ConfigError(f"these keys cannot change on resume (they would break the run): {', '.join(refused)}")
        if changed and int(os.environ.get("RANK", "0")) == 0:
            # The run now follows the new values (say train.rounds): so do the next resume,
            # `selfplay status` and the dashboard.
            atomic_write(saved, to_yaml(cfg))
            logging.getLogger(__name__).info("config.yaml updated on resume: %s", ", ".join(changed))
    else:
        if not args.config:
            raise ConfigError("train needs CONFIG.yaml (or --resume RUN_DIR)")
        if args.run_dir:
            overrides.append(f"run.dir={args.run_dir}")
        cfg = load_config(args.config, overrides)
    from curriculum.trainer import SelfPlayTrainer

    trainer = SelfPlayTrainer(cfg, resume=bool(args.resume))
    try:
        trainer.train()
    finally:
        trainer.close()
    if trainer.dist.is_main:
        print(f"metrics: {Path(cfg.run.dir) / 'metrics.jsonl'}")
    return 0


def _eval(args) -> int:
    from curriculum.evaluate import evaluate_run

    results = evaluate_run(Path(args.run_dir))
    print(json.dumps(results, indent=1))
    return 0


def _status(args) -> int:
    from curriculum.rundir import run_status

    dirs = [Path(d) for d in args.run_dirs] or sorted(p.parent for p in Path(args.root).glob("*/config.yaml"))
    for d in dirs:
        print(json.dumps(run_status(d)))
    return 0


def _dashboard(args) -> int:
    from curriculum import dashboard

    run_dirs = [Path(d) for d in args.run_dirs]
    for run_dir in run_dirs:
        if not (run_dir / "config.yaml").is_file():
            raise FileNotFoundError(f"{run_dir} has no config.yaml; is it a run directory?")
    if not args.serve:
        print(dashboard.write(run_dirs, args.out))
        return 0
    server = dashboard.serve(run_dirs, args.port, args.host)
    what = run_dirs[0] if len(run_dirs) == 1 else f"{len(run_dirs)} runs"
    print(f"dashboard of {what} at http://{args.host}:{server.server_address[1]}/ (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def _keys(args) -> int:
    for key, doc in valid_keys().items():
        print(f"{key}\t{doc}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="selfplay", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train from a config, or resume a run")
    t.add_argument("config", nargs="?", help="YAML config (omit with --resume)")
    t.add_argument("overrides", nargs="*", help="dotted key=value overrides")
    t.add_argument("--run-dir", help="same as run.dir=...")
    t.add_argument("--resume", metavar="RUN_DIR", help="continue from the newest complete checkpoint")
    t.set_defaults(fn=_train)
    e = sub.add_parser("eval", help="score a run's latest checkpoint on the held-out benchmark")
    e.add_argument("run_dir")
    e.set_defaults(fn=_eval)
    s = sub.add_parser("status", help="round, newest checkpoint and state of runs")
    s.add_argument("run_dirs", nargs="*")
    s.add_argument("--root", default="runs", help="where to look when no run is named")
    s.set_defaults(fn=_status)
    d = sub.add_parser("dashboard", help="write a run's local dashboard (HTML), or compare runs; or serve it live")
    d.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="one run, or several to compare")
    d.add_argument("--out", help="where to write the page (default RUN_DIR/dashboard.html; compare.html for several)")
    d.add_argument("--serve", action="store_true", help="serve the page, rebuilt on every request")
    d.add_argument("--port", type=int, default=8000)
    d.add_argument("--host", default="127.0.0.1", help="address to bind (default: this machine only)")
    d.set_defaults(fn=_dashboard)
    k = sub.add_parser("config-keys", help="list every config key with its meaning")
    k.set_defaults(fn=_keys)
    return p


def main(argv: list[str] | None = None) -> int:
    rank = int(os.environ.get("RANK", "0"))  # set by torchrun / the deepspeed launcher
    logging.basicConfig(level=logging.INFO if rank == 0 else logging.WARNING,
                        format=f"%(asctime)s %(levelname)s %(name)s{f' [rank {rank}]' if rank else ''}: %(message)s")
    for noisy in ("httpx", "wandb", "transformers", "torch.distributed", "DeepSpeed", "deepspeed"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except ConfigError as exc:
        print(f"selfplay: config error: {exc}", file=sys.stderr)
        return 2
    except FileNotFoundError as exc:
        print(f"selfplay: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
