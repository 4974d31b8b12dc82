/* elf_check.h — is a file an lmpress plugin?  Answered from the file's bytes, without dlopen:
 * dlopen runs a library's constructors (and those of the libraries it needs) before the loader
 * could look at anything, so a file is only handed to dlopen once it passes this check.
 *
 * The file must be a 64-bit little-endian ELF shared object (ET_DYN) for this machine, with a
 * section header table whose SHT_DYNSYM section defines `symbol` as a global function
 * (STB_GLOBAL, STT_FUNC, a section index other than SHN_UNDEF, default or protected
 * visibility).  The file is untrusted: every offset, size and index is checked against the file
 * and its tables before it is read, and only what the check needs is read (the header, the
 * section header table, .dynsym and its string table). */
#ifndef LMP_CORE_ELF_CHECK_H
#define LMP_CORE_ELF_CHECK_H

/* 0 when `path` defines `symbol` as above; otherwise an error (error.h) that names the file
 * and says why, e.g. "x.so: not an lmpress plugin: no exported symbol 'lmp_plugin_entry'". */
int lmp_elf_check_plugin(const char *path, const char *symbol);

#endif
