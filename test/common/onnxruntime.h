/* ONNX Runtime for the tests that compare kiln with it: node and
 * onnxruntime-node in KILN_ONNXRUNTIME_DIR, installed by npm on first use
 * (tools/install_onnxruntime.sh, which takes a lock, so tests that start at
 * once install it once). */
#ifndef KILN_TEST_ONNXRUNTIME_H
#define KILN_TEST_ONNXRUNTIME_H

#include <stdio.h>
#include <stdlib.h>

/* 1 when `node` can load onnxruntime-node from ort_dir (installing it first
 * if needed); 0 with why[] saying what is missing. */
static inline int test_onnxruntime_ready(const char *root, const char *ort_dir, char *why,
                                         size_t why_size)
{
    char cmd[1024];
    if (!root || !ort_dir) {
        snprintf(why, why_size, "KILN_SOURCE_ROOT or KILN_ONNXRUNTIME_DIR is unset (run "
                 "through meson test)");
        return 0;
    }
    if (system("node --version > /dev/null 2>&1") != 0) {
        snprintf(why, why_size, "node (Node.js) is not installed (Debian: apt-get install "
                 "nodejs npm)");
        return 0;
    }
    snprintf(cmd, sizeof cmd, "sh '%s/tools/install_onnxruntime.sh' '%s'", root, ort_dir);
    if (system(cmd) != 0) {
        snprintf(why, why_size, "onnxruntime-node could not be installed into %s (npm's "
                 "message is above)", ort_dir);
        return 0;
    }
    snprintf(cmd, sizeof cmd, "NODE_PATH='%s/node_modules' node -e "
             "\"require('onnxruntime-node')\"", ort_dir);
    if (system(cmd) != 0) {
        snprintf(why, why_size, "onnxruntime-node in %s does not load", ort_dir);
        return 0;
    }
    return 1;
}

#endif
