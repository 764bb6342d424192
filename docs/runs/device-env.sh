# The set-up every device script of 2026-12-06's tenth session shares, sourced from the
# repository root on the device machine (`. docs/runs/device-env.sh`): unpacks the Vulkan
# and GL loaders carried in .gl (skipped with NO_DEBS=1, for a warm machine that has them),
# copies everything printed to $OUT/log.txt, selects wgpu's Vulkan backend, points the
# loader at NVIDIA's driver where it finds none by itself, and prints the time.
[ -n "${NO_DEBS:-}" ] || { for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig; }
exec > >(tee "$OUT/log.txt") 2>&1
export WGPU_BACKEND=vulkan
if ! .dev/wgpool info --adapter nvidia > /dev/null 2>&1; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
date -u
