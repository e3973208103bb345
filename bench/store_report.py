"""The table bench_store.py prints from its rows (also --report FILE)."""

from __future__ import annotations

from bench.store_data import OVERSAMPLING


def report(rows: list[dict]) -> None:
    def f(x, spec):
        return format(x, spec) if isinstance(x, int | float) else "-"

    if rows:
        print(f"machine: {rows[0].get('machine')}")
    print("| backend | points | upsert pts/s | + index build s | top-10 p50 / p99 ms | recall@10 | filtered p50 / p99 ms "
          "| filtered recall@10 | reopen s | RSS MB | disk MB | queries | load |")
    print("| --- " * 13 + "|")
    for r in sorted(rows, key=lambda r: (r["n"], r["backend"])):
        print(f"| {r['backend']} | {r['n']:,} | {f(r.get('upsert_pts_s'), ',.0f')} | {f(r.get('optimize_s'), '.1f')} "
              f"| {f(r.get('top10_p50_ms'), '.1f')} / {f(r.get('top10_p99_ms'), '.1f')} | {f(r.get('recall'), '.3f')} "
              f"| {f(r.get('filtered_p50_ms'), '.1f')} / {f(r.get('filtered_p99_ms'), '.1f')} | {f(r.get('filtered_recall'), '.3f')} "
              f"| {f(r.get('reopen_s'), '.2f')} | {f(r.get('rss_mb'), ',.0f')} | {f(r.get('disk_mb'), ',.0f')} "
              f"| {r.get('queries', '-')} | {r.get('load_start')} → {r.get('load_end')} |")
    for n in sorted({r["n"] for r in rows}):
        e = next((r for r in rows if r["n"] == n and r["backend"] == "edge"), None)
        for q in (r for r in rows if r["n"] == n and r["backend"].startswith("edge+") and e and "top10_p50_ms" in r):
            over = ", ".join(f"oversampling {o:g}: recall {q[f'oversampling{o:g}_recall']:.3f}, p50 ×"
                             f"{e['top10_p50_ms'] / q[f'oversampling{o:g}_top10_p50_ms']:.2f} faster" for o in OVERSAMPLING)
            print(f"{n:,}: {q['backend']} vs edge — index build ×{e['optimize_s'] / q['optimize_s']:.2f} faster, top-10 p50 "
                  f"×{e['top10_p50_ms'] / q['top10_p50_ms']:.2f} faster, recall {q['recall']:.3f} vs {e['recall']:.3f} ({over}), "
                  f"RSS {q['rss_mb']:,.0f} vs {e['rss_mb']:,.0f} MB, disk {q['disk_mb']:,.0f} vs {e['disk_mb']:,.0f} MB")
        lo = next((r for r in rows if r["n"] == n and r["backend"] == "local"), None)
        if e and lo and "top10_p50_ms" in e and "top10_p50_ms" in lo:
            print(f"{n:,}: edge vs local mode — upsert ×{e['upsert_pts_s'] / lo['upsert_pts_s']:.0f}, top-10 p50 "
                  f"×{lo['top10_p50_ms'] / e['top10_p50_ms']:.0f} faster, filtered ×{lo['filtered_p50_ms'] / e['filtered_p50_ms']:.0f}, "
                  f"reopen ×{lo['reopen_s'] / e['reopen_s']:.0f}")
