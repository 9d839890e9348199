"""keras_attention: attention mechanisms of sequence-to-sequence learning for Keras 3."""

from setuptools import find_packages, setup

setup(
    name="keras_attention",
    version="0.1.0",
    description=(
        "Attention layers (dot, general, additive, concat, local, multi-head), "
        "Transformer layers and positional embeddings for Keras 3."
    ),
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["keras_attention", "keras_attention.*"]),
    install_requires=[
        # Keras 3 on the TensorFlow backend; these versions are tested together.
        "tensorflow==2.21.*",
        "keras>=3.15,<4",
        "numpy",
    ],
    extras_require={
        "recipes": [
            "tensorflow-text==2.21.*",
            "keras-tuner==1.4.8",
            "sacrebleu>=2.4",
            "matplotlib>=3.8",
            "mlxtend>=0.23",
            "tensorboard",
            "tensorflow-serving-api==2.21.*",
            "requests",
        ],
        "dev": ["pytest>=8", "pytest-xdist>=3"],
        # Peers that bench/ measures against; not needed by the library.
        "bench": ["keras-hub==0.32.*"],
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
