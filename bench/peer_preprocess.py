"""peer_preprocess.py - what a numpy + scikit-learn user writes for
`hsi preprocess IN OUT --normalize zscore --pca K`: map the uint16 BIL
cube, z-score each band, PCA(K, svd_solver="covariance_eigh") (the
covariance route, scikit-learn >= 1.5; "full" before), write the scores
float32 band-major (BSQ) with a temporary file renamed into place.

usage: peer_preprocess.py IN OUT B L S K
"""
import os
import sys

import numpy as np
import sklearn
from sklearn.decomposition import PCA

src, dst = sys.argv[1], sys.argv[2]
B, L, S, K = (int(a) for a in sys.argv[3:7])
cube = np.memmap(src, dtype="<u2", mode="r", shape=(L, B, S))   # BIL: (line, band, sample)
X = cube.transpose(0, 2, 1).reshape(-1, B).astype(np.float32)   # (pixels, bands)
X -= X.mean(axis=0)
X /= X.std(axis=0)
major, minor = (int(v) for v in sklearn.__version__.split(".")[:2])
solver = "covariance_eigh" if (major, minor) >= (1, 5) else "full"
Y = PCA(K, svd_solver=solver).fit_transform(X).astype(np.float32)
tmp = dst + ".tmp"
np.ascontiguousarray(Y.T).tofile(tmp)                          # (K, lines*samples) = BSQ
os.replace(tmp, dst)
