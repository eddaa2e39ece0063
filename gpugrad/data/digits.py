"""The embedded default dataset: 8x8 handwritten digits (1797 images, 10 classes).

Provenance: "Optical Recognition of Handwritten Digits" by E. Alpaydin and C. Kaynak (1998), UCI Machine Learning
Repository, https://doi.org/10.24432/C50P49 -- licensed CC BY 4.0 (https://creativecommons.org/licenses/by/4.0/).
This is the UCI test portion (1797 samples from 13 writers) as scikit-learn 1.9.1 ships it in
``sklearn/datasets/data/digits.csv.gz`` (sha256 09f66e6d...51e23aa22); ``digits.npz`` beside this file holds the
same values, unchanged, as ``images`` (uint8 (1797, 64), 0..16: on-pixel counts of 4x4 blocks of a 32x32 bitmap,
row-major 8x8) and ``labels`` (int64 (1797,), 0..9).  Rebuild it with::

    python -c "import numpy as np, sklearn.datasets as d; b = d.load_digits(); np.savez_compressed(
        'digits.npz', images=b.data.astype('uint8'), labels=b.target.astype('int64'))"

>>> x_train, y_train, x_test, y_test = digits_split()
>>> x_train.shape, x_test.shape, x_train.dtype, float(x_train.max())
((1437, 64), (360, 64), dtype('float32'), 1.0)
"""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

PATH = Path(__file__).with_name("digits.npz")
N_CLASSES = 10
MAX_VALUE = 16  # pixel values are counts of on-pixels in a 4x4 block


@functools.cache
def _load():
    with np.load(PATH, allow_pickle=False) as z:
        images, labels = z["images"], z["labels"]
    images.setflags(write=False)  # cached and shared: callers get copies
    labels.setflags(write=False)
    return images, labels


def load_digits(scale=False):
    """(images (1797, 64), labels int64 (1797,)): uint8 0..16, or float32 in [0, 1] with ``scale=True``."""
    images, labels = _load()
    x = images.astype(np.float32) / np.float32(MAX_VALUE) if scale else images.copy()
    return x, labels.copy()


def stratified_split(labels, test_size, seed=0):
    """(train_idx, test_idx), each sorted: every class contributes to the test set in proportion to its size.

    Per-class test counts are the proportional shares rounded by largest remainder, so they add up to
    ``test_size`` exactly; which samples go where is drawn from ``numpy.random.default_rng(seed)``.
    """
    labels = np.asarray(labels)
    n = len(labels)
    if not 0 < test_size < n:
        raise ValueError(f"test_size must be between 1 and {n - 1}, got {test_size}")
    classes, counts = np.unique(labels, return_counts=True)
    share = counts * test_size / n
    take = np.floor(share).astype(np.int64)
    # largest remainders first; ties broken by class order (stable sort), so the split is fixed
    extra = np.argsort(-(share - take), kind="stable")[: test_size - take.sum()]
    take[extra] += 1
    rng = np.random.default_rng(seed)
    test = [rng.permutation(np.flatnonzero(labels == c))[:k] for c, k in zip(classes, take)]
    test_idx = np.sort(np.concatenate(test))
    train_idx = np.setdiff1d(np.arange(n), test_idx)
    return train_idx, test_idx


def digits_split(test_size=360, seed=0, scale=True):
    """(x_train, y_train, x_test, y_test): the fixed, seeded, stratified split (1437 / 360 by default).

    Images are float32 in [0, 1] (``scale=False``: uint8 0..16); labels int64.
    """
    x, y = load_digits(scale=scale)
    train_idx, test_idx = stratified_split(y, test_size, seed)
    return x[train_idx], y[train_idx], x[test_idx], y[test_idx]
