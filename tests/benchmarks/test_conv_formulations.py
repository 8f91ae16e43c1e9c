"""benchmarks/speed/conv_formulations.py: Winograd's and the FFT's convolutions against a
NumPy loop over the 25 taps, so that its timings compare the same convolution (the
transforms themselves: tests/models/test_winograd.py)."""

import numpy as np
import pytest

from benchmarks.speed import conv_formulations as cf
from tests.models.test_winograd import direct_conv64


@pytest.mark.parametrize("conv", ["winograd", "winograd4", "fft", "winograd4_cxx"])
@pytest.mark.parametrize("size", [6, 7])
def test_each_formulation_is_the_same_convolution(conv, size):
  rng = np.random.default_rng(1)
  x = rng.normal(size=(2, size, size, 3)).astype(np.float32)
  w = rng.normal(size=(5, 5, 3, 4)).astype(np.float32)
  got = np.asarray(cf.FORMULATIONS[conv](x, w), np.float64)
  want = direct_conv64(x, w, ((2, 2), (2, 2)))
  np.testing.assert_allclose(got, want, atol=2e-4 * np.abs(got).max())


def test_sizes_below_one_are_refused():
  with pytest.raises(SystemExit):
    cf.parse(["--repeats=0"])
