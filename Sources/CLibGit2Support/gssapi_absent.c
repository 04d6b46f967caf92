/*
 * libgit2's HTTP transport can answer a "Negotiate" (Kerberos) challenge
 * through GSSAPI. fprep links libgit2 from its static archive, and Debian
 * ships GSSAPI (MIT Kerberos) only as a shared library, which would bring
 * seven more libraries into every fprep process. fprep never uses libgit2's
 * network transports, so GSSAPI is absent instead: every call fails with
 * GSS_S_FAILURE and libgit2 reports that the authentication failed.
 *
 * The declarations follow RFC 2744 (the C bindings of GSSAPI v2) closely
 * enough for the calling convention: every argument is a pointer or a
 * 32-bit integer, and the result a 32-bit status.
 */
#include <stddef.h>
#include <stdint.h>

typedef uint32_t OM_uint32;
typedef struct { OM_uint32 length; void *elements; } fprep_gss_oid_desc;

#define FPREP_GSS_S_FAILURE (13u << 16)

/* The name type libgit2 names the server with; its value is never read. */
static fprep_gss_oid_desc hostbased_service = { 0, NULL };
fprep_gss_oid_desc *GSS_C_NT_HOSTBASED_SERVICE = &hostbased_service;

static OM_uint32 absent(OM_uint32 *minor)
{
    if (minor) *minor = 0;
    return FPREP_GSS_S_FAILURE;
}

OM_uint32 gss_import_name(OM_uint32 *minor, void *buffer, void *type, void **name);
OM_uint32 gss_release_name(OM_uint32 *minor, void **name);
OM_uint32 gss_release_buffer(OM_uint32 *minor, void *buffer);
OM_uint32 gss_release_oid_set(OM_uint32 *minor, void **set);
OM_uint32 gss_indicate_mechs(OM_uint32 *minor, void **set);
OM_uint32 gss_delete_sec_context(OM_uint32 *minor, void **context, void *token);
OM_uint32 gss_display_status(OM_uint32 *minor, OM_uint32 status, int type, void *mech,
                             OM_uint32 *context, void *text);
OM_uint32 gss_init_sec_context(OM_uint32 *minor, void *credential, void **context, void *target,
                               void *mech, OM_uint32 flags, OM_uint32 time, void *bindings,
                               void *input, void **actual_mech, void *output,
                               OM_uint32 *returned_flags, OM_uint32 *returned_time);

OM_uint32 gss_import_name(OM_uint32 *minor, void *buffer, void *type, void **name)
{
    (void)buffer; (void)type;
    if (name) *name = NULL;
    return absent(minor);
}

OM_uint32 gss_release_name(OM_uint32 *minor, void **name)
{
    if (name) *name = NULL;
    if (minor) *minor = 0;
    return 0;
}

OM_uint32 gss_release_buffer(OM_uint32 *minor, void *buffer)
{
    (void)buffer;
    if (minor) *minor = 0;
    return 0;
}

OM_uint32 gss_release_oid_set(OM_uint32 *minor, void **set)
{
    if (set) *set = NULL;
    if (minor) *minor = 0;
    return 0;
}

OM_uint32 gss_indicate_mechs(OM_uint32 *minor, void **set)
{
    if (set) *set = NULL;
    return absent(minor);
}

OM_uint32 gss_delete_sec_context(OM_uint32 *minor, void **context, void *token)
{
    (void)token;
    if (context) *context = NULL;
    if (minor) *minor = 0;
    return 0;
}

OM_uint32 gss_display_status(OM_uint32 *minor, OM_uint32 status, int type, void *mech,
                             OM_uint32 *context, void *text)
{
    (void)status; (void)type; (void)mech; (void)text;
    if (context) *context = 0;
    return absent(minor);
}

OM_uint32 gss_init_sec_context(OM_uint32 *minor, void *credential, void **context, void *target,
                               void *mech, OM_uint32 flags, OM_uint32 time, void *bindings,
                               void *input, void **actual_mech, void *output,
                               OM_uint32 *returned_flags, OM_uint32 *returned_time)
{
    (void)credential; (void)context; (void)target; (void)mech; (void)flags; (void)time;
    (void)bindings; (void)input; (void)output;
    if (actual_mech) *actual_mech = NULL;
    if (returned_flags) *returned_flags = 0;
    if (returned_time) *returned_time = 0;
    return absent(minor);
}
