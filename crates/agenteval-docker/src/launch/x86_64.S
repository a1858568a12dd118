# agenteval's launcher for an agent's command in a task container (x86-64 Linux, no libc):
#   launch CAP PROGRAM [ARG...]
# sets no_new_privs, drops capability CAP from the bounding set and from the effective,
# permitted and inheritable sets, then executes PROGRAM. Exits 126 if a step fails (dropping
# from the bounding set may fail only when not root), 127 if PROGRAM cannot be executed.
.intel_syntax noprefix
.globl _start
_start:
    mov rbx, rsp                    # [rbx] argc, [rbx+8] argv[0], ...
    mov eax, 157                    # prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    mov edi, 38
    mov esi, 1
    xor edx, edx
    xor r10d, r10d
    xor r8d, r8d
    syscall
    test rax, rax
    jnz fail
    mov rsi, [rbx+16]               # CAP, in decimal
    test rsi, rsi
    jz fail
    xor ecx, ecx
digit:
    movzx eax, byte ptr [rsi]
    test al, al
    jz parsed
    sub eax, 48
    cmp eax, 9
    ja fail
    imul ecx, ecx, 10
    add ecx, eax
    cmp ecx, 63
    ja fail
    inc rsi
    jmp digit
parsed:
    mov r12d, ecx
    mov eax, 157                    # prctl(PR_CAPBSET_DROP, CAP)
    mov edi, 24
    mov esi, r12d
    xor edx, edx
    syscall
    test rax, rax
    jz sets
    mov eax, 102                    # getuid(): root must drop it
    syscall
    test rax, rax
    jz fail
sets:
    sub rsp, 32                     # header {version, pid} then data[2] {effective, permitted, inheritable}
    mov dword ptr [rsp], 0x20080522
    mov dword ptr [rsp+4], 0
    mov rdi, rsp
    lea rsi, [rsp+8]
    mov eax, 125                    # capget
    syscall
    test rax, rax
    jnz fail
    mov ecx, r12d
    mov eax, ecx
    shr eax, 5
    imul eax, eax, 12
    lea rdi, [rsp+8+rax]
    and ecx, 31
    mov edx, 1
    shl edx, cl
    not edx
    and [rdi], edx
    and [rdi+4], edx
    and [rdi+8], edx
    mov rdi, rsp
    lea rsi, [rsp+8]
    mov eax, 126                    # capset
    syscall
    test rax, rax
    jnz fail
    mov rdi, [rbx+24]               # execve(PROGRAM, &argv[2], envp)
    test rdi, rdi
    jz fail
    lea rsi, [rbx+24]
    mov rax, [rbx]
    lea rdx, [rbx+rax*8+16]
    mov eax, 59
    syscall
    mov edi, 127
    jmp out
fail:
    mov edi, 126
out:
    mov eax, 231                    # exit_group
    syscall
