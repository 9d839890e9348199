"""Training support that depends on the backend: what `fit` needs on several
replicas and workers with TensorFlow's distribution strategies
(`distribute.py`). Importable on every backend (elsewhere a no-op); it
imports TensorFlow only on the TensorFlow backend, when it is used.

    distribute.py   adapt_for_distribution: MirroredStrategy / MultiWorkerMirroredStrategy;
                    repeated_for_fit: one iterator for every epoch of several workers
"""
