"""An attacker with native code: a C++ extension (load_inline, built on the CPU as well) whose
`attack(what, arg)` tries one thing the OS sandbox must stop, and reports what it saw. The
candidate raises with the report (so the test reads it in the message) unless it is empty.
`mark` returns the macros of two build flags that a shell would have expanded."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = r"""
#include <torch/extension.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#define STR2(x) #x
#define STR(x) STR2(x)

static std::string err(const char* what) { return std::string("err:") + what + ":" + strerror(errno); }

static std::string slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}

std::string attack(std::string what, std::string arg) {
    if (what == "none") return "";
    if (what == "write") {
        int fd = open(arg.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) return err("open");
        ssize_t n = write(fd, "x", 1);
        close(fd);
        return n == 1 ? "ok:wrote " + arg : err("write");
    }
    if (what == "link" || what == "rename") {  // a file from outside into the scratch, then a write through it
        std::string target = std::string(getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp") + "/moved-in";
        int r = what == "link" ? link(arg.c_str(), target.c_str()) : rename(arg.c_str(), target.c_str());
        if (r != 0) return err(what.c_str());
        int fd = open(target.c_str(), O_WRONLY | O_APPEND);
        if (fd < 0) return err("open");
        ssize_t n = write(fd, "x", 1);
        close(fd);
        return n == 1 ? "ok:wrote through " + what : err("write");
    }
    if (what == "secrets") {  // every environment and command line this process can see
        std::string found = "none";
        DIR* d = opendir("/proc");
        int pids = 0;
        while (struct dirent* e = d ? readdir(d) : nullptr) {
            if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
            ++pids;
            for (const char* f : {"environ", "cmdline"}) {
                std::string text = slurp(std::string("/proc/") + e->d_name + "/" + f);
                if (text.find(arg) != std::string::npos) found = std::string(e->d_name) + "/" + f;
            }
        }
        if (d) closedir(d);
        if (getenv("OPENAI_API_KEY")) found = "own environment";
        return "ok:secret found in " + found + " among " + std::to_string(pids) + " processes";
    }
    if (what == "exec") {
        pid_t p = fork();
        if (p == 0) {
            execl(arg.c_str(), arg.c_str(), "-c", "true", (char*)0);
            _exit(100 + errno);
        }
        int st = 0;
        waitpid(p, &st, 0);
        return "ok:exec exit status " + std::to_string(WEXITSTATUS(st));
    }
    if (what == "daemon") {
        pid_t p = fork();
        if (p == 0) {
            setsid();
            if (fork() == 0) {
                prctl(PR_SET_NAME, arg.c_str());
                for (;;) sleep(1);
            }
            _exit(0);
        }
        waitpid(p, nullptr, 0);
        return "";
    }
    if (what == "killall") { kill(-1, SIGKILL); return err("kill"); }
    if (what == "ptrace") { long r = ptrace(PTRACE_ATTACH, 1, 0, 0); return r < 0 ? err("ptrace") : "ok:attached"; }
    if (what == "vmread") {
        char buf[8];
        struct iovec local = {buf, sizeof buf}, remote = {(void*)0x400000, sizeof buf};
        ssize_t n = process_vm_readv(1, &local, 1, &remote, 1, 0);
        return n < 0 ? err("process_vm_readv") : "ok:read another process";
    }
    if (what == "connect") {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (s < 0) return err("socket");
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(std::stoi(arg));
        inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
        if (connect(s, (sockaddr*)&a, sizeof a) < 0) return err("connect");
        return "ok:connected";
    }
    if (what == "forkbomb") {
        int n = 0;
        for (int i = 0; i < 20000; ++i) {
            pid_t p = fork();
            if (p == 0) { pause(); _exit(0); }
            if (p < 0) break;
            ++n;
        }
        return "ok:forked " + std::to_string(n);
    }
    if (what == "fill") {
        int fd = open(arg.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) return err("open");
        std::string chunk(1 << 20, 'x');
        long total = 0;
        ssize_t n;
        while ((n = write(fd, chunk.data(), chunk.size())) > 0) total += n;
        std::string r = err("write") + " after " + std::to_string(total >> 20) + " MiB";
        close(fd);
        return r;
    }
    if (what == "mark") return std::string("ok:mark=") + STR(RATCHET_MARK) + " tick=" + STR(RATCHET_TICK);
    if (what == "uid") return "ok:uid=" + std::to_string(getuid());
    if (what == "mknod") {  // a device node (the host's /dev/null numbers) in its own scratch ($TMPDIR)
        const char* tmp = getenv("TMPDIR");
        std::string path = std::string(tmp ? tmp : "/tmp") + "/node";
        int r = mknod(path.c_str(), S_IFCHR | 0666, makedev(1, 3));
        return r == 0 ? "ok:made " + path : err("mknod");
    }
    return "err:unknown attack";
}

torch::Tensor compute(torch::Tensor x) { return at::relu(x) * 2 + 1; }
"""
DECLS = "std::string attack(std::string what, std::string arg);\ntorch::Tensor compute(torch::Tensor x);"

extension = load_inline(name="native_attacks", cpp_sources=[DECLS, SOURCE], functions=["attack", "compute"],
                        extra_cflags=["-O1", "-DRATCHET_MARK=$(echo 42)", "-DRATCHET_TICK=`echo 7`"])


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
