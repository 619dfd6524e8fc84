/* A dataset over a folder of class subfolders of PNG and JPEG files, as
 * keras.utils.image_dataset_from_directory reads one: listed once, sorted,
 * and decoded when a batch needs a file.
 *
 * Keras's listing (keras/src/utils/dataset_utils.py): classes are the
 * folder's entries that os.path.isdir (links followed) and that do not
 * start with '.'; files are what os.walk lists in a class folder whose
 * lowercased name ends in an image extension, hidden ones included, and a
 * link is listed whether or not its target exists. kiln lists the same,
 * but flat (os.walk also descends into folders) and without special files
 * (a FIFO named x.png would block the reader): a dangling or looping link
 * fails when read, naming it, and skip_bad_images skips it. */
#include "runtime/context/context.h"
#include "runtime/data/dataset.h"
#include "runtime/formats/image_decode.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FOLDER_FN "kiln_dataset_from_image_folder"
#define MAX_FILE_BYTES ((uint64_t)1 << 32)   /* a "PNG" this large is surely not one */

typedef struct image_folder {
    int32_t height, width, channels;
    float scale, offset;
    int skip_bad;
    char *paths;             /* every sample's path, NUL-terminated, in sample order */
    size_t *path_at;         /* sample i's path starts at paths + path_at[i] */
    int64_t *class_first;    /* class k holds samples [class_first[k], class_first[k + 1]) */
    int32_t n_classes;
} image_folder;

/* NUL-terminated strings in one growing block, and where each starts. */
typedef struct string_list {
    char *text;
    size_t used, room;
    size_t *at;
    int64_t n, cap;
} string_list;

static kiln_status list_add(kiln_context *ctx, string_list *l, const char *s)
{
    const size_t len = strlen(s) + 1;
    if (l->used + len > l->room) {
        size_t room = l->room ? l->room : 4096;
        while (room < l->used + len)
            room *= 2;
        char *text = kiln_realloc(ctx, l->text, room);
        if (!text)
            return kiln_error_oom(ctx, "the image folder's names", room);
        l->text = text;
        l->room = room;
    }
    if (l->n == l->cap) {
        const int64_t cap = l->cap ? 2 * l->cap : 256;
        size_t *at = kiln_realloc(ctx, l->at, (size_t)cap * sizeof *at);
        if (!at)
            return kiln_error_oom(ctx, "the image folder's names", (size_t)cap * sizeof *at);
        l->at = at;
        l->cap = cap;
    }
    memcpy(l->text + l->used, s, len);
    l->at[l->n++] = l->used;
    l->used += len;
    return KILN_OK;
}

static void list_clear(kiln_context *ctx, string_list *l)
{
    kiln_free(ctx, l->text);
    kiln_free(ctx, l->at);
    memset(l, 0, sizeof *l);
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The list's strings in strcmp order (pointers into it, valid until it grows). */
static kiln_status list_sorted(kiln_context *ctx, const string_list *l, const char ***out)
{
    const char **names = kiln_alloc(ctx, (size_t)(l->n ? l->n : 1) * sizeof *names);
    *out = names;
    if (!names)
        return kiln_error_oom(ctx, "the image folder's names", (size_t)l->n * sizeof *names);
    for (int64_t i = 0; i < l->n; i++)
        names[i] = l->text + l->at[i];
    qsort(names, (size_t)l->n, sizeof *names, compare_names);
    return KILN_OK;
}

/* "dir/name" in a buffer reused from call to call. */
static kiln_status join(kiln_context *ctx, char **buf, size_t *room, const char *dir,
                        const char *name)
{
    const size_t need = strlen(dir) + 1 + strlen(name) + 1;
    if (need > *room) {
        char *grown = kiln_realloc(ctx, *buf, need);
        if (!grown)
            return kiln_error_oom(ctx, "a path", need);
        *buf = grown;
        *room = need;
    }
    snprintf(*buf, need, "%s/%s", dir, name);
    return KILN_OK;
}

static int ascii_lower(int c)
{
    return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c;
}

/* Keras's test, name.lower().endswith(extension): ".png" itself is one. */
static int is_image_name(const char *name)
{
    static const char *const extensions[] = {".png", ".jpg", ".jpeg"};
    const size_t n = strlen(name);
    for (size_t e = 0; e < sizeof extensions / sizeof *extensions; e++) {
        const char *ext = extensions[e];
        const size_t m = strlen(ext);
        size_t i = 0;
        while (n >= m && i < m && ascii_lower((unsigned char)name[n - m + i]) == ext[i])
            i++;
        if (n >= m && i == m)
            return 1;
    }
    return 0;
}

/* `path` is a symbolic link whose target cannot be reached: missing
 * (ENOENT) or a loop of links (ELOOP). */
static int is_broken_link(const char *path, int error)
{
    struct stat sb;
    return (error == ENOENT || error == ELOOP) && lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode);
}

/* Adds to `names` the entries of `dir` that are class folders (want_dirs:
 * directories, links followed, not hidden) or image files (regular files
 * and broken links, hidden ones included), as Keras lists them. */
static kiln_status list_dir(kiln_context *ctx, const char *dir, int want_dirs,
                            string_list *names)
{
    char *path = NULL;
    size_t room = 0;
    kiln_status st = KILN_OK;
    DIR *d = opendir(dir);
    if (!d)
        return kiln_error(ctx, KILN_ERROR_IO, "%s: cannot open folder %s: %s", FOLDER_FN, dir,
                          strerror(errno));
    for (;;) {
        errno = 0;
        const struct dirent *e = readdir(d);
        if (!e) {
            if (errno)
                st = kiln_error(ctx, KILN_ERROR_IO, "%s: cannot read folder %s: %s", FOLDER_FN,
                                dir, strerror(errno));
            break;
        }
        const char *name = e->d_name;
        if (want_dirs ? name[0] == '.' : !is_image_name(name))
            continue;
        st = join(ctx, &path, &room, dir, name);
        if (st != KILN_OK)
            break;
        struct stat sb;
        const int found = stat(path, &sb) == 0;
        const int error = errno;
        if (!found && !is_broken_link(path, error)) {
            st = kiln_error(ctx, KILN_ERROR_IO, "%s: cannot read %s: %s", FOLDER_FN, path,
                            strerror(error));
            break;
        }
        /* A broken link is no class, but an image that fails when read. */
        if (want_dirs ? found && S_ISDIR(sb.st_mode) : !found || S_ISREG(sb.st_mode)) {
            st = list_add(ctx, names, e->d_name);
            if (st != KILN_OK)
                break;
        }
    }
    closedir(d);
    kiln_free(ctx, path);
    return st;
}

static void folder_free(kiln_context *ctx, image_folder *src)
{
    if (!src)
        return;
    kiln_free(ctx, src->paths);
    kiln_free(ctx, src->path_at);
    kiln_free(ctx, src->class_first);
    kiln_free(ctx, src);
}

static void free_names(kiln_context *ctx, char **names, int32_t n)
{
    for (int32_t i = 0; names && i < n; i++)
        kiln_free(ctx, names[i]);
    kiln_free(ctx, names);
}

/* The class subfolders of `folder`, sorted, as the dataset's class names. */
static kiln_status list_classes(kiln_context *ctx, const char *folder, char ***out,
                                int32_t *n_out)
{
    string_list dirs = {0};
    const char **sorted = NULL;
    char **names = NULL;
    int32_t n = 0;
    kiln_status st = list_dir(ctx, folder, 1, &dirs);
    if (st != KILN_OK)
        goto fail;
    if (dirs.n == 0) {
        st = kiln_error(ctx, KILN_ERROR_DATA, "%s: %s has no class subfolder; expected one "
                        "folder of images per class", FOLDER_FN, folder);
        goto fail;
    }
    if (dirs.n > INT32_MAX) {
        st = kiln_error(ctx, KILN_ERROR_DATA, "%s: %s has %lld class subfolders, more than "
                        "kiln's %d classes", FOLDER_FN, folder, (long long)dirs.n, INT32_MAX);
        goto fail;
    }
    st = list_sorted(ctx, &dirs, &sorted);
    if (st != KILN_OK)
        goto fail;
    names = kiln_calloc(ctx, (size_t)dirs.n, sizeof *names);
    if (!names) {
        st = kiln_error_oom(ctx, "class names", (size_t)dirs.n * sizeof *names);
        goto fail;
    }
    for (n = 0; n < (int32_t)dirs.n; n++) {
        names[n] = kiln_strdup(ctx, sorted[n]);
        if (!names[n]) {
            st = kiln_error_oom(ctx, "a class name", strlen(sorted[n]) + 1);
            goto fail;
        }
    }
    *out = names;
    *n_out = n;
    names = NULL;
fail:
    free_names(ctx, names, n);
    kiln_free(ctx, (void *)sorted);
    list_clear(ctx, &dirs);
    return st;
}

/* Every class folder's images, sorted, as full paths in one block. */
static kiln_status list_files(kiln_context *ctx, const char *folder, char *const *classes,
                              int32_t n_classes, image_folder *src)
{
    string_list paths = {0}, files = {0};
    const char **sorted = NULL;
    char *dir = NULL, *path = NULL;
    size_t dir_room = 0, path_room = 0;
    kiln_status st = KILN_OK;
    src->class_first = kiln_alloc(ctx, ((size_t)n_classes + 1) * sizeof *src->class_first);
    if (!src->class_first)
        return kiln_error_oom(ctx, "the image folder's classes",
                              ((size_t)n_classes + 1) * sizeof *src->class_first);
    for (int32_t k = 0; k < n_classes; k++) {
        src->class_first[k] = paths.n;
        st = join(ctx, &dir, &dir_room, folder, classes[k]);
        if (st == KILN_OK)
            st = list_dir(ctx, dir, 0, &files);
        if (st != KILN_OK)
            goto fail;
        if (files.n == 0) {
            st = kiln_error(ctx, KILN_ERROR_DATA, "%s: class folder %s holds no image (.png, "
                            ".jpg or .jpeg file)", FOLDER_FN, dir);
            goto fail;
        }
        st = list_sorted(ctx, &files, &sorted);
        for (int64_t i = 0; st == KILN_OK && i < files.n; i++) {
            st = join(ctx, &path, &path_room, dir, sorted[i]);
            if (st == KILN_OK)
                st = list_add(ctx, &paths, path);
        }
        kiln_free(ctx, (void *)sorted);
        sorted = NULL;
        list_clear(ctx, &files);
        if (st != KILN_OK)
            goto fail;
    }
    src->class_first[n_classes] = paths.n;
    src->paths = paths.text;
    src->path_at = paths.at;
    paths.text = NULL;
    paths.at = NULL;
fail:
    list_clear(ctx, &paths);
    list_clear(ctx, &files);
    kiln_free(ctx, dir);
    kiln_free(ctx, path);
    return st;
}

/* The whole file; *broken set when it is a broken link (a defect of the
 * folder, as a bad image is, where a file gone since it was listed or a
 * failing disk is not). */
static kiln_status read_file(kiln_context *ctx, const char *path, unsigned char **out,
                             size_t *size, int *broken)
{
    *out = NULL;
    *size = 0;
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        const int error = errno;
        *broken = is_broken_link(path, error);
        return kiln_error(ctx, KILN_ERROR_IO, "cannot open %s: %s", path,
                          *broken && error == ENOENT ? "it is a symbolic link to a missing file"
                                                     : strerror(error));
    }
    kiln_status st = KILN_OK;
    unsigned char *data = NULL;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        st = kiln_error(ctx, KILN_ERROR_IO, "cannot read %s: %s", path, strerror(errno));
        goto fail;
    }
    if ((uint64_t)sb.st_size > MAX_FILE_BYTES) {
        st = kiln_error(ctx, KILN_ERROR_FORMAT, "%s is %lld bytes, more than the %llu an "
                        "image file may have", path, (long long)sb.st_size,
                        (unsigned long long)MAX_FILE_BYTES);
        goto fail;
    }
    const size_t want = (size_t)sb.st_size;
    data = kiln_alloc(ctx, want ? want : 1);
    if (!data) {
        st = kiln_error_oom(ctx, path, want);
        goto fail;
    }
    size_t got = 0;
    while (got < want) {
        const ssize_t r = read(fd, data + got, want - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            st = kiln_error(ctx, KILN_ERROR_IO, "reading %s failed: %s", path, strerror(errno));
            goto fail;
        }
        if (r == 0)
            break;   /* shrank since fstat: the decoder sees what is there */
        got += (size_t)r;
    }
    *out = data;
    *size = got;
    data = NULL;
fail:
    kiln_free(ctx, data);
    close(fd);
    return st;
}

/* Reads, decodes and resizes sample i's file into features; *bad set when
 * the file is a bad image or a broken link, which skip_bad_images skips. */
static kiln_status read_image(kiln_context *ctx, const image_folder *src, int64_t i,
                              float *features, int *bad)
{
    const char *path = src->paths + src->path_at[i];
    unsigned char *bytes;
    size_t size;
    kiln_image img;
    *bad = 0;
    kiln_status st = read_file(ctx, path, &bytes, &size, bad);
    if (st != KILN_OK)
        return st;
    st = kiln_image_decode(ctx, path, bytes, size, src->channels, &img);
    kiln_free(ctx, bytes);
    *bad = st == KILN_ERROR_FORMAT || st == KILN_ERROR_UNSUPPORTED;
    if (st != KILN_OK)
        return st;
    kiln_image_resize_bilinear(img.pixels, img.height, img.width, img.channels, features,
                               src->height, src->width, src->scale, src->offset);
    kiln_image_free(ctx, &img);
    return KILN_OK;
}

static int32_t class_of(const image_folder *src, int64_t i)
{
    int32_t lo = 0, hi = src->n_classes - 1;
    while (lo < hi) {
        const int32_t mid = lo + (hi - lo + 1) / 2;
        if (src->class_first[mid] <= i)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

static kiln_status folder_read(const kiln_dataset *ds, int64_t index,
                               const kiln_read_plan *plan, float *features,
                               void *label)
{
    (void)plan;
    const image_folder *src = ds->source;
    kiln_context *ctx = ds->ctx;
    const int32_t k = class_of(src, index);
    int bad;
    kiln_status st = read_image(ctx, src, index, features, &bad);
    if (st != KILN_OK && src->skip_bad && bad) {
        /* The next file of the class that decodes stands in, wrapping
         * around: the same one every epoch, whichever thread reads it. */
        char first[1024];
        const kiln_status first_st = st;
        snprintf(first, sizeof first, "%s", kiln_diag_message(&ctx->host));
        const int64_t start = src->class_first[k], n = src->class_first[k + 1] - start;
        int64_t j = index;
        for (int64_t step = 1; step < n && bad; step++) {
            j = start + (index - start + step) % n;
            st = read_image(ctx, src, j, features, &bad);
        }
        if (st == KILN_OK) {
            __atomic_fetch_add(&((kiln_dataset *)ds)->skipped, 1, __ATOMIC_RELAXED);
            kiln_log(ctx, KILN_LOG_WARNING, "skipped a bad image: %s; sample %lld reads %s "
                     "instead", first, (long long)index, src->paths + src->path_at[j]);
        } else if (bad) {
            st = kiln_error(ctx, first_st, "none of the %lld images of class '%s' can be "
                            "decoded (skip_bad_images found no stand-in); the first: %s",
                            (long long)n, ds->class_names[k], first);
        }
    }
    if (st == KILN_OK && label)
        *(int32_t *)label = k;
    return st;
}

static void folder_destroy(kiln_dataset *ds)
{
    folder_free(ds->ctx, ds->source);
    ds->source = NULL;
}

/* A sample's label is its class: the first sample of [first, first +
 * count) in a class >= limit (but `ignore`), named by its file. */
static kiln_status folder_find_label(const kiln_dataset *ds, int32_t part, int64_t first,
                                     int64_t count, int32_t limit, int32_t ignore,
                                     kiln_label_hit *hit)
{
    (void)part;
    const image_folder *src = ds->source;
    hit->searched = 1;
    for (int32_t k = limit > 0 ? limit : 0; k < src->n_classes; k++) {
        const int64_t i = src->class_first[k] > first ? src->class_first[k] : first;
        if (k == ignore || i >= src->class_first[k + 1] || i >= first + count)
            continue;
        hit->sample = i;
        hit->label = k;
        snprintf(hit->where, sizeof hit->where, "%s", src->paths + src->path_at[i]);
        return KILN_OK;
    }
    return KILN_OK;
}

static const kiln_source_ops image_folder_ops = {
    .kind = "image folder",
    .read = folder_read,
    .destroy = folder_destroy,
    .find_label = folder_find_label,
};

static kiln_status check_options(kiln_context *ctx, const kiln_image_folder_options *o)
{
    if (o->height < 0 || o->width < 0)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: height %d, width %d; both "
                          "must be > 0 (images are resized to them), or 0 for 256", FOLDER_FN,
                          (int)o->height, (int)o->width);
    if ((int64_t)o->height * o->width > KILN_IMAGE_MAX_PIXELS)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: height %d x width %d is more "
                          "than %lld pixels", FOLDER_FN, (int)o->height, (int)o->width,
                          (long long)KILN_IMAGE_MAX_PIXELS);
    if (o->channels != 0 && o->channels != 1 && o->channels != 3)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: channels is %d; it must be 1 "
                          "(grayscale) or 3 (RGB), or 0 for 3", FOLDER_FN, (int)o->channels);
    /* Every pixel, 0 to 255, must stay finite after value * scale + offset. */
    if (!isfinite(o->scale) || !isfinite(o->offset) ||
        255.0 * fabs((double)o->scale) + fabs((double)o->offset) > FLT_MAX)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: scale %g, offset %g; both "
                          "must be finite, and 255 * scale + offset too", FOLDER_FN,
                          (double)o->scale, (double)o->offset);
    return KILN_OK;
}

kiln_status kiln_dataset_from_image_folder(kiln_context *ctx, const char *folder,
                                           const kiln_image_folder_options *options,
                                           kiln_dataset **out)
{
    if (out)
        *out = NULL;
    if (!ctx)
        return KILN_ERROR_INVALID_ARGUMENT;
    if (!out)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: out is NULL", FOLDER_FN);
    if (!folder)
        return kiln_error(ctx, KILN_ERROR_INVALID_ARGUMENT, "%s: folder is NULL", FOLDER_FN);
    kiln_image_folder_options o;
    kiln_diag why;
    if (kiln_options_take(&o, sizeof o, options, sizeof(size_t), "kiln_image_folder_options",
                          &why) != KILN_OK)
        return kiln_error(ctx, why.status, "%s: %s", FOLDER_FN, why.message);
    /* Keras's image_size default, (256, 256). */
    o.height = o.height ? o.height : 256;
    o.width = o.width ? o.width : 256;
    kiln_status st = check_options(ctx, &o);
    if (st != KILN_OK)
        return st;
    char **classes = NULL;
    int32_t n_classes = 0;
    kiln_dataset *ds = NULL;
    image_folder *src = kiln_calloc(ctx, 1, sizeof *src);
    if (!src)
        return kiln_error_oom(ctx, "an image folder", sizeof *src);
    src->height = o.height;
    src->width = o.width;
    src->channels = o.channels ? o.channels : 3;
    src->scale = o.scale != 0.0f ? o.scale : 1.0f / 255.0f;
    src->offset = o.offset;
    src->skip_bad = o.skip_bad_images != 0;
    st = list_classes(ctx, folder, &classes, &n_classes);
    if (st != KILN_OK)
        goto fail;
    src->n_classes = n_classes;
    st = list_files(ctx, folder, classes, n_classes, src);
    if (st != KILN_OK)
        goto fail;
    const kiln_shape shape = {.rank = 3, .dims = {o.height, o.width, src->channels}};
    st = kiln_dataset_new_streamed(ctx, src->class_first[n_classes], &shape,
                                   KILN_LABELS_SPARSE, 1, &ds);
    if (st != KILN_OK)
        goto fail;
    ds->ops = &image_folder_ops;
    ds->source = src;
    ds->dtype = KILN_DTYPE_UINT8;
    ds->max_label = n_classes - 1;
    ds->class_names = classes;
    ds->n_classes = n_classes;
    *out = ds;
    return KILN_OK;
fail:
    folder_free(ctx, src);
    free_names(ctx, classes, n_classes);
    return st;
}
