"""Figures the paper reports (Vaswani et al. 2017, Table 3), keyed by preset name.

Each entry: ``(dev_perplexity, dev_bleu, params_millions or None)`` on newstest2013, as in
Table 3 (params blank in the paper where they equal base's).
"""

TABLE3 = {
    "base": (4.92, 25.8, 65),
    "big": (4.33, 26.4, 213),
    "table3/A1": (5.29, 24.9, None),
    "table3/A2": (5.00, 25.5, None),
    "table3/A3": (4.91, 25.8, None),
    "table3/A4": (5.01, 25.4, None),
    "table3/B1": (5.16, 25.1, 58),
    "table3/B2": (5.01, 25.4, 60),
    "table3/C1": (6.11, 23.7, 36),
    "table3/C2": (5.19, 25.3, 50),
    "table3/C3": (4.88, 25.5, 80),
    "table3/C4": (5.75, 24.5, 28),
    "table3/C5": (4.66, 26.0, 168),
    "table3/C6": (5.12, 25.4, 53),
    "table3/C7": (4.75, 26.2, 90),
    "table3/D1": (5.77, 24.6, None),
    "table3/D2": (4.95, 25.5, None),
    "table3/D3": (4.67, 25.3, None),
    "table3/D4": (5.47, 25.7, None),
    "table3/E": (4.92, 25.7, None),
}

#: Short descriptions of each Table 3 row's change from base.
CHANGES = {
    "base": "base", "big": "big",
    "table3/A1": "h=1, d_k=d_v=512", "table3/A2": "h=4, d_k=d_v=128", "table3/A3": "h=16, d_k=d_v=32",
    "table3/A4": "h=32, d_k=d_v=16", "table3/B1": "d_k=16", "table3/B2": "d_k=32", "table3/C1": "N=2",
    "table3/C2": "N=4", "table3/C3": "N=8", "table3/C4": "d_model=256, d_k=d_v=32",
    "table3/C5": "d_model=1024, d_k=d_v=128", "table3/C6": "d_ff=1024", "table3/C7": "d_ff=4096",
    "table3/D1": "P_drop=0.0", "table3/D2": "P_drop=0.2", "table3/D3": "eps_ls=0.0", "table3/D4": "eps_ls=0.2",
    "table3/E": "learned positions",
}
