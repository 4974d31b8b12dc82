/* elf_check.c — see elf_check.h.  Reads with pread() into buffers of checked sizes: no mapping
 * (a file truncated under us would be a SIGBUS), no offset used before it is bounded. */
#include "plugin/elf_check.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"

#if defined(__x86_64__)
#define HOST_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define HOST_MACHINE EM_AARCH64
#elif defined(__powerpc64__)
#define HOST_MACHINE EM_PPC64
#elif defined(__riscv) && __riscv_xlen == 64
#define HOST_MACHINE EM_RISCV
#endif

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "elf_check.c reads little-endian ELF files in host order"
#endif

/* The tables read are capped: a real plugin's .dynsym and .dynstr are a few kB to a few MB. */
#define MAX_TABLE ((uint64_t)256 << 20)

/* Reads n bytes at off into a new buffer, after checking [off, off + n) lies in the file. */
static int read_at(int fd, const char *path, uint64_t size, uint64_t off, uint64_t n, const char *what,
                   void **out)
{
    *out = NULL;
    if (off > size || n > size - off)
        return lmp_fail(LMP_EINVAL, "%s: not an lmpress plugin: malformed ELF file (%s at offset %llu, %llu bytes, "
                        "lies beyond the end of the %llu-byte file)",
                        path, what, (unsigned long long)off, (unsigned long long)n, (unsigned long long)size);
    if (n > MAX_TABLE)
        return lmp_fail(LMP_EINVAL, "%s: not an lmpress plugin: ELF %s of %llu bytes is implausibly large", path,
                        what, (unsigned long long)n);
    unsigned char *buf = malloc(n ? (size_t)n : 1);
    if (!buf) return lmp_fail(LMP_ENOMEM, "out of memory");
    uint64_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, buf + got, (size_t)(n - got), (off_t)(off + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            free(buf);
            return lmp_fail(LMP_EIO, "%s: cannot read the ELF %s: %s", path, what,
                            r < 0 ? strerror(errno) : "unexpected end of file");
        }
        got += (uint64_t)r;
    }
    *out = buf;
    return 0;
}

static int check_fd(int fd, const char *path, uint64_t size, const char *symbol)
{
    Elf64_Ehdr eh;
    unsigned char ident[EI_NIDENT] = {0};
    if (size < EI_NIDENT || pread(fd, ident, EI_NIDENT, 0) != EI_NIDENT || memcmp(ident, ELFMAG, SELFMAG) != 0)
        return lmp_fail(LMP_EINVAL, "%s: not an lmpress plugin: not a shared object (invalid ELF header)", path);
    if (ident[EI_CLASS] != ELFCLASS64)
        return lmp_fail(LMP_EINVAL, "%s: not an lmpress plugin: a %s ELF file; plugins are 64-bit ELF shared objects",
                        path, ident[EI_CLASS] == ELFCLASS32 ? "32-bit" : "malformed (unknown class)");
    if (ident[EI_DATA] != ELFDATA2LSB)
        return lmp_fail(LMP_EINVAL, "%s: not an lmpress plugin: a %s ELF file; plugins are little-endian ELF shared objects",
                        path, ident[EI_DATA] == ELFDATA2MSB ? "big-endian" : "malformed (unknown byte order)");
    if (size < sizeof eh || pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh)
        return lmp_fail(LMP_EINVAL, "%s: not an lmpress plugin: truncated ELF header", path);
    if (eh.e_type != ET_DYN)
        return lmp_fail(LMP_EINVAL, "%s: not an lmpress plugin: an ELF file of type %u, not a shared object (ET_DYN)",
                        path, (unsigned)eh.e_type);
#ifdef HOST_MACHINE
    if (eh.e_machine != HOST_MACHINE)
        return lmp_fail(LMP_EINVAL, "%s: not an lmpress plugin for this machine: ELF machine %u, this host is %u",
                        path, (unsigned)eh.e_machine, (unsigned)HOST_MACHINE);
#endif
    if (eh.e_shoff == 0)
        return lmp_fail(LMP_EINVAL, "%s: not an lmpress plugin: the ELF file has no section headers, so its "
                        "symbols cannot be checked without loading it", path);
    if (eh.e_shentsize != sizeof(Elf64_Shdr))
        return lmp_fail(LMP_EINVAL, "%s: not an lmpress plugin: malformed ELF file (section header size %u)", path,
                        (unsigned)eh.e_shentsize);
    /* Extended numbering: with 0 in e_shnum, the count is section 0's sh_size. */
    uint64_t shnum = eh.e_shnum;
    if (shnum == 0) {
        Elf64_Shdr *s0;
        int st = read_at(fd, path, size, eh.e_shoff, sizeof *s0, "section header 0", (void **)&s0);
        if (st) return st;
        shnum = s0->sh_size;
        free(s0);
    }
    if (shnum == 0 || shnum > size / sizeof(Elf64_Shdr))
        return lmp_fail(LMP_EINVAL, "%s: not an lmpress plugin: malformed ELF file (%llu section headers)", path,
                        (unsigned long long)shnum);
    Elf64_Shdr *sh = NULL;
    char *strtab = NULL;
    Elf64_Sym *syms = NULL;
    int st = read_at(fd, path, size, eh.e_shoff, shnum * sizeof *sh, "section header table", (void **)&sh);
    if (st) return st;
    uint64_t dynsym = shnum;
    for (uint64_t i = 0; i < shnum && dynsym == shnum; i++)
        if (sh[i].sh_type == SHT_DYNSYM) dynsym = i;
    if (dynsym == shnum) {
        st = lmp_fail(LMP_EINVAL, "%s: not an lmpress plugin: no dynamic symbol table, so no exported symbol '%s'",
                      path, symbol);
        goto done;
    }
    const Elf64_Shdr *ds = &sh[dynsym];
    if (ds->sh_entsize != sizeof(Elf64_Sym) || ds->sh_size % sizeof(Elf64_Sym) != 0 || ds->sh_link >= shnum ||
        sh[ds->sh_link].sh_type != SHT_STRTAB) {
        st = lmp_fail(LMP_EINVAL, "%s: not an lmpress plugin: malformed ELF dynamic symbol table", path);
        goto done;
    }
    const Elf64_Shdr *ss = &sh[ds->sh_link];
    if ((st = read_at(fd, path, size, ds->sh_offset, ds->sh_size, "dynamic symbol table", (void **)&syms)) ||
        (st = read_at(fd, path, size, ss->sh_offset, ss->sh_size, "dynamic string table", (void **)&strtab)))
        goto done;
    uint64_t n_syms = ds->sh_size / sizeof(Elf64_Sym), strsz = ss->sh_size;
    size_t len = strlen(symbol);
    int found = 0;
    const char *why = NULL;
    for (uint64_t i = 0; i < n_syms && !found; i++) {
        const Elf64_Sym *s = &syms[i];
        /* The name and its terminating NUL must both lie inside the string table. */
        if (s->st_name >= strsz || strsz - s->st_name < len + 1) continue;
        if (memcmp(strtab + s->st_name, symbol, len + 1) != 0) continue;
        int vis = ELF64_ST_VISIBILITY(s->st_other);
        if (s->st_shndx == SHN_UNDEF) why = "is undefined (imported, not defined)";
        else if (ELF64_ST_BIND(s->st_info) != STB_GLOBAL) why = "is not a global symbol";
        else if (ELF64_ST_TYPE(s->st_info) != STT_FUNC) why = "is not a function";
        else if (vis != STV_DEFAULT && vis != STV_PROTECTED) why = "is not exported (hidden visibility)";
        else found = 1;
    }
    if (!found)
        st = why ? lmp_fail(LMP_EINVAL, "%s: not an lmpress plugin: its symbol '%s' %s", path, symbol, why)
                 : lmp_fail(LMP_EINVAL, "%s: not an lmpress plugin: no exported symbol '%s'", path, symbol);
done:
    free(strtab);
    free(syms);
    free(sh);
    return st;
}

int lmp_elf_check_plugin(const char *path, const char *symbol)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) return lmp_fail(LMP_EIO, "%s: cannot load plugin: %s", path, strerror(errno));
    struct stat sb;
    int st;
    if (fstat(fd, &sb) != 0) st = lmp_fail(LMP_EIO, "%s: cannot load plugin: %s", path, strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        st = lmp_fail(LMP_EINVAL, "%s: cannot load plugin: not a regular file", path);
    else st = check_fd(fd, path, (uint64_t)sb.st_size, symbol);
    close(fd);
    return st;
}
