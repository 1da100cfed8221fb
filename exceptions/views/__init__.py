"""Exception pages, one module per feature: requests (new, detail, withdraw), the inbox, the
report. Views parse, authorise through `exceptions.access`, call one service, render."""
