"""Peers' result files imported as servelab runs: SGLang bench_serving, vLLM bench serve,
AIPerf and GuideLLM.

`import_file(path)` tells the tool from the file's content, maps each of its values to
servelab's field (converting units; what the file lacks stays None, never invented) and
returns an `ImportedRun`; `write_imported(run, out)` writes it as a run directory.
docs/METRICS.md ("Imported results: the field mapping") lists every mapping.
"""

from servelab.bench.peers.importer import READS, ImportedRun, import_file, write_imported

__all__ = ["READS", "ImportedRun", "import_file", "write_imported"]
