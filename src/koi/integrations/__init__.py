"""Optional real-world plugins: telemetry sources and launchers for real fleets.

Each module here is an ordinary pluggy plugin built on :mod:`koi.plugins`' hookspecs; importing
``koi`` never imports them, and each names the optional extra it needs.
"""
