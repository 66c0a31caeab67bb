"""Built-in catalogs: GPUs, model architectures, and instance types with their prices.

The data live as TOML files in ``koi/catalog/data`` (sources in ``docs/catalog.md``)::

    from koi.catalog import load_catalog

    catalog = load_catalog()                      # built-ins, parsed once per process
    catalog = load_catalog("my_fleet.toml")       # plus user entries (same format)
    h100 = catalog.gpus["H100-SXM"]
    envs = catalog.environments(gpus=["L4"], markets=["spot"])
"""

from __future__ import annotations

from koi.catalog._catalog import Catalog
from koi.catalog._instance import PCIE_X16_GB_S, InstanceType
from koi.catalog._load import load_catalog, model_sources
from koi.catalog._parse import CatalogEntries, parse_catalog_text, read_catalog_file

__all__ = [
    "PCIE_X16_GB_S",
    "Catalog",
    "CatalogEntries",
    "InstanceType",
    "load_catalog",
    "model_sources",
    "parse_catalog_text",
    "read_catalog_file",
]
