/* cmd_train.c — `hsi train`, `hsi predict`, `hsi eval` and `hsi profile
 * train`: argument parsing and printing around the library's trainer and
 * run directory (pipeline/trainer.h, pipeline/run.h). */
#include <cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "cli.h"
#include "core/dist.h"
#include "io/cube.h"
#include "io/labels.h"
#include "models/model_cuda.h"
#include "models/nn.h"
#include "models/optim.h"
#include "pipeline/report.h"
#include "pipeline/run.h"
#include "pipeline/trainer.h"

static const char train_usage[] =
    "usage: hsi train CUBE LABELS --out DIR [options]\n"
    "       hsi train --train-labels TRAIN --test-labels TEST CUBE --out DIR [options]\n"
    "       hsi train --list-models\n"
    "\n"
    "Splits the labelled pixels, fits normalisation and PCA on the TRAINING pixels\n"
    "only (unless --fit-on all), trains a CNN with validation each epoch, keeps the\n"
    "best epoch, and writes to DIR (created with its parents): model.safetensors,\n"
    "preprocessing.safetensors, pipeline.json, metrics.json (OA, AA, kappa,\n"
    "per-class recall/precision/F1, confusion matrix, split counts, timings),\n"
    "split.hdr (each pixel's role) + split.json, map.hdr + map (ENVI\n"
    "classification), map.png (with legend), map.tif (when the cube is\n"
    "georeferenced), train.log, history.csv (per epoch), train_state.safetensors\n"
    "(for --resume), curves.png, confusion.png, spectra.png and report.html (one\n"
    "page with the configuration, metrics, pictures, timings and protocol). The\n"
    "files are described in docs/run-directory.md.\n"
    "\n"
    "model and data:\n"
    "  --model NAME        cnn2d (default), hybridsn, cnn1d (see --list-models)\n"
    "  --var NAME          .mat variable of the cube; --labels-var NAME for labels\n"
    "  --bands SPEC        use these bands (1-based, e.g. 1-100,120-)\n"
    "  --wavelengths SPEC  use bands inside these ranges in nm (400-1340,1450-1800)\n"
    "  --keep-bad-bands    do not drop bands marked bbl = 0\n"
    "  --normalize MODE    zscore (default), minmax, global-minmax, l2, none\n"
    "  --pca K             principal components (default 30; 0 = no PCA)\n"
    "  --pca-variance F    components explaining fraction F of the variance\n"
    "  --whiten            whitened components\n"
    "  --fit-on train|all  fit normalisation/PCA on training pixels (default) or on\n"
    "                      every pixel (the usual literature protocol: leaky, flagged)\n"
    "  --patch P           odd patch size (default 11; hybridsn paper: 25)\n"
    "  --pad mirror|zero   border handling (default mirror)\n"
    "split:\n"
    "  --split random|disjoint   stratified random pixels (default) or spatially\n"
    "                      disjoint blocks with a guard band of P/2 pixels\n"
    "  --train F           fraction of each class for training (default 0.1)\n"
    "  --per-class N       N training pixels per class instead\n"
    "  --val F             fraction of the training pixels kept for validation\n"
    "                      (default 0: train on all of them for --epochs and keep\n"
    "                      the last epoch; with F > 0 the best validation epoch is\n"
    "                      kept and --patience applies. Few pixels per class make\n"
    "                      a validation set too small to choose an epoch)\n"
    "  --block N           disjoint block size in pixels (default max(16, 4 (P/2) + 4);\n"
    "                      small scenes with narrow fields may leave a class without\n"
    "                      training pixels: then use explicit maps)\n"
    "  --train-labels F, --test-labels F   explicit split maps\n"
    "training:\n"
    "  --epochs N (40)  --batch N (16)  --lr X (1e-3, AdamW, cosine schedule)\n"
    "  --schedule cosine|constant|step   learning-rate schedule (cosine: 2 warm-up epochs)\n"
    "  --weight-decay X (1e-4)  --patience N (15; early stop on validation OA, 0 = off)\n"
    "  --no-augment        no flips/rotations\n"
    "  --seed N (1)  --workers N (1)  --prefetch N (2)  --threads N (engine threads)\n"
    "  --device cpu|cuda|auto   (default cpu) cuda: the fit (statistics, PCA\n"
    "                      covariance), the fused pass, the training steps, validation\n"
    "                      and the scene map on the GPU (each epoch's checkpoint\n"
    "                      copied to the host: --resume continues on either device);\n"
    "                      auto: cuda when a GPU is there (one rank), else cpu\n"
    "  --conv auto|direct|gemm|cudnn   the convolutions (default auto: the device's\n"
    "                      best). CPU: auto (Winograd and direct kernels), direct\n"
    "                      (no Winograd), gemm (im2col + OpenBLAS). GPU: auto (cuDNN\n"
    "                      when it loads, but gemm for the backward of 3-D\n"
    "                      convolutions; else gemm), gemm (im2col + cuBLAS), cudnn\n"
    "                      (every one, and batch norm, by cuDNN 9, loaded at run\n"
    "                      time from $HSI_CUDNN, else libcudnn.so.9; FP32 math, no\n"
    "                      TF32; the fastest deterministic algorithms; an error when\n"
    "                      it cannot run). direct is the CPU's only, cudnn the GPU's\n"
    "                      only. train.log says which ran\n"
    "  --host-patches      GPU: cut the training patches on the host and copy them\n"
    "                      (default: on the device, from the features copied there\n"
    "                      once when they are in memory and take at most a quarter\n"
    "                      of its free memory; the same batches either way)\n"
    "  --cuda-graph        GPU: each full batch's training step (zeroing, forward,\n"
    "                      loss, backward, AdamW) and validation forward as one\n"
    "                      CUDA Graph launch instead of one per kernel; the same\n"
    "                      results bit for bit\n"
    "  --resume            continue from DIR/train_state.safetensors\n"
    "  --overwrite         replace a run already in DIR (refused otherwise)\n"
    "  --quiet             no progress lines\n"
    "memory:\n"
    "  --mem-limit SIZE    memory for the preprocessed features, SIZE in bytes or\n"
    "                      with K, M, G or T (powers of 1024: 512M, 2G). They take\n"
    "                      features x lines x samples x 4 bytes; above SIZE they are\n"
    "                      streamed: written pixel-interleaved to a temporary file\n"
    "                      in DIR (its name removed at once: the space is freed when\n"
    "                      the job ends, however it ends), mapped read-only, and\n"
    "                      read through the page cache by the patches, validation\n"
    "                      and the map; their pages are given back whenever the\n"
    "                      process holds SIZE / 4 of mapped files (so are those of\n"
    "                      a mapped raw cube bigger than SIZE). The results are the\n"
    "                      same bits. Not counted: a .mat or GeoTIFF cube, read\n"
    "                      whole into memory (hsi convert it to ENVI first), about\n"
    "                      20 bytes per labelled pixel (split lists, the map),\n"
    "                      the pass's tiles (kept within SIZE / 8), the model and\n"
    "                      the loader's batches. Default: no limit\n"
    "several ranks (mpirun -np N hsi train ..., a build with make MPI=1):\n"
    "  data-parallel: --batch is the global batch, split in N equal slices;\n"
    "  rank 0's weights go to all ranks, gradients are summed in buckets while\n"
    "  backward runs, rank 0 validates and writes every file; --resume works on\n"
    "  any N. The cores of a node are shared between its ranks.\n"
    "  --bn local|sync     batch norm over each rank's slice (default) or over the\n"
    "                      global batch (SyncBatchNorm: equal to one process)\n"
    "  --deterministic     the same bits for any N: fixed tiles of --tile samples\n"
    "                      summed in a fixed tree (with --bn local; batch norm per tile)\n"
    "  --tile N            samples per forward/backward pass (default: a rank's slice;\n"
    "                      --deterministic: 4); gradients of the tiles accumulate\n"
    "  --bucket-mb X       gradient bucket size (25; the first bucket 1 MiB)\n"
    "  --no-overlap        allreduce after backward instead of during it\n"
    "  --hash-every N      check every N steps that all ranks hold the same weights\n"
    "                      (50; 0 = never)\n"
    "  --ddp               the data-parallel path on one process too (the reference\n"
    "                      for N ranks: same sampler, dropout and augmentation draws)\n";

/* --mem-limit SIZE: bytes, or a number with K, M, G or T (powers of 1024;
 * "1.5G" too). 1 when parsed, else a usage error has been printed. */
static int parse_size(const char *cmd, const char *opt, const char *s, int64_t *out)
{
    char *end = NULL;
    double v = s ? strtod(s, &end) : 0;
    double mul = 1;
    if (end && end != s && *end) {
        switch (*end) {
        case 'k': case 'K': mul = 1024.0; break;
        case 'm': case 'M': mul = 1024.0 * 1024; break;
        case 'g': case 'G': mul = 1024.0 * 1024 * 1024; break;
        case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; break;
        default: mul = 0;
        }
        end++;
        if (mul && (*end == 'i' || *end == 'I')) end++; /* 2Gi, 2GiB */
        if (mul && (*end == 'b' || *end == 'B')) end++;
    }
    if (!s || !end || end == s || *end || mul == 0 || !(v * mul >= 1) || v * mul > 9.0e18) {
        hsi_cli_usage_error(cmd, "%s expects a size of at least 1 byte: a number with an optional "
                                 "K, M, G or T suffix (powers of 1024), e.g. 512M or 2G; got '%s'",
                            opt, s ? s : "");
        return 0;
    }
    *out = (int64_t)(v * mul);
    return 1;
}

static int parse_train_args(hsi_train_config *c, int argc, char **argv, const char *cmd,
                            const char **out, int *list, int *quiet)
{
    const char *pos[2] = {NULL, NULL};
    int npos = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        long long k;
        double d;
#define NEED(opt)                                                                                  \
    if (!v) return hsi_cli_usage_error(cmd, "%s needs a value", opt)
        if (!strcmp(argv[i], "--list-models")) *list = 1;
        else if (hsi_cli_opt(argc, argv, &i, "--out", &v)) { NEED("--out"); *out = v; }
        else if (hsi_cli_opt(argc, argv, &i, "--model", &v)) { NEED("--model"); c->model = v; }
        else if (hsi_cli_opt(argc, argv, &i, "--var", &v)) { NEED("--var"); c->cube_var = v; }
        else if (hsi_cli_opt(argc, argv, &i, "--labels-var", &v)) { NEED("--labels-var"); c->labels_var = v; }
        else if (hsi_cli_opt(argc, argv, &i, "--bands", &v)) { NEED("--bands"); c->bands_spec = v; }
        else if (hsi_cli_opt(argc, argv, &i, "--wavelengths", &v)) { NEED("--wavelengths"); c->wavelengths_spec = v; }
        else if (!strcmp(argv[i], "--keep-bad-bands")) c->keep_bad_bands = 1;
        else if (hsi_cli_opt(argc, argv, &i, "--normalize", &v)) {
            NEED("--normalize");
            if (hsi_norm_mode_parse(&c->norm, v) != HSI_OK)
                return hsi_cli_usage_error(cmd, "--normalize expects zscore, minmax, global-minmax, l2 or none");
        } else if (hsi_cli_opt(argc, argv, &i, "--pca", &v)) {
            if (!hsi_cli_parse_int(cmd, "--pca", v, 0, 10000, &k)) return HSI_EXIT_USAGE;
            c->pca = (int)k;
        } else if (hsi_cli_opt(argc, argv, &i, "--pca-variance", &v)) {
            if (!hsi_cli_parse_double(cmd, "--pca-variance", v, &d)) return HSI_EXIT_USAGE;
            if (d <= 0 || d > 1) return hsi_cli_usage_error(cmd, "--pca-variance must be in (0, 1]");
            c->pca_variance = d;
            c->pca = 0;
        } else if (!strcmp(argv[i], "--whiten")) c->whiten = 1;
        else if (hsi_cli_opt(argc, argv, &i, "--fit-on", &v)) {
            NEED("--fit-on");
            if (!strcmp(v, "all")) c->fit_on_all = 1;
            else if (!strcmp(v, "train")) c->fit_on_all = 0;
            else return hsi_cli_usage_error(cmd, "--fit-on expects train or all");
        } else if (hsi_cli_opt(argc, argv, &i, "--patch", &v)) {
            if (!hsi_cli_parse_int(cmd, "--patch", v, 1, 99, &k)) return HSI_EXIT_USAGE;
            c->patch = (int)k;
        } else if (hsi_cli_opt(argc, argv, &i, "--pad", &v)) {
            NEED("--pad");
            if (!strcmp(v, "mirror")) c->pad = HSI_PAD_MIRROR;
            else if (!strcmp(v, "zero")) c->pad = HSI_PAD_ZERO;
            else return hsi_cli_usage_error(cmd, "--pad expects mirror or zero");
        } else if (hsi_cli_opt(argc, argv, &i, "--split", &v)) {
            NEED("--split");
            if (!strcmp(v, "random")) c->split = HSI_SPLIT_RANDOM;
            else if (!strcmp(v, "disjoint")) c->split = HSI_SPLIT_DISJOINT;
            else return hsi_cli_usage_error(cmd, "--split expects random or disjoint");
        } else if (hsi_cli_opt(argc, argv, &i, "--train", &v)) {
            if (!hsi_cli_parse_double(cmd, "--train", v, &d)) return HSI_EXIT_USAGE;
            if (d <= 0 || d >= 1) return hsi_cli_usage_error(cmd, "--train is a fraction in (0, 1); use --per-class N for counts");
            c->train_fraction = d;
        } else if (hsi_cli_opt(argc, argv, &i, "--per-class", &v)) {
            if (!hsi_cli_parse_int(cmd, "--per-class", v, 1, 1LL << 40, &k)) return HSI_EXIT_USAGE;
            c->per_class = k;
        } else if (hsi_cli_opt(argc, argv, &i, "--val", &v)) {
            if (!hsi_cli_parse_double(cmd, "--val", v, &d)) return HSI_EXIT_USAGE;
            if (d < 0 || d >= 1) return hsi_cli_usage_error(cmd, "--val must be in [0, 1)");
            c->val_fraction = d;
        } else if (hsi_cli_opt(argc, argv, &i, "--block", &v)) {
            if (!hsi_cli_parse_int(cmd, "--block", v, 2, 100000, &k)) return HSI_EXIT_USAGE;
            c->block = (int)k;
        } else if (hsi_cli_opt(argc, argv, &i, "--train-labels", &v)) { NEED("--train-labels"); c->train_labels = v; }
        else if (hsi_cli_opt(argc, argv, &i, "--test-labels", &v)) { NEED("--test-labels"); c->test_labels = v; }
        else if (hsi_cli_opt(argc, argv, &i, "--epochs", &v)) {
            if (!hsi_cli_parse_int(cmd, "--epochs", v, 1, 100000, &k)) return HSI_EXIT_USAGE;
            c->epochs = (int)k;
        } else if (hsi_cli_opt(argc, argv, &i, "--batch", &v)) {
            if (!hsi_cli_parse_int(cmd, "--batch", v, 1, 65536, &k)) return HSI_EXIT_USAGE;
            c->batch = (int)k;
        } else if (hsi_cli_opt(argc, argv, &i, "--lr", &v)) {
            if (!hsi_cli_parse_double(cmd, "--lr", v, &d)) return HSI_EXIT_USAGE;
            if (d <= 0) return hsi_cli_usage_error(cmd, "--lr must be > 0");
            c->lr = d;
        } else if (hsi_cli_opt(argc, argv, &i, "--weight-decay", &v)) {
            if (!hsi_cli_parse_double(cmd, "--weight-decay", v, &d)) return HSI_EXIT_USAGE;
            c->weight_decay = d;
        } else if (hsi_cli_opt(argc, argv, &i, "--patience", &v)) {
            if (!hsi_cli_parse_int(cmd, "--patience", v, 0, 100000, &k)) return HSI_EXIT_USAGE;
            c->patience = (int)k;
        } else if (hsi_cli_opt(argc, argv, &i, "--schedule", &v)) {
            NEED("--schedule");
            if (!strcmp(v, "cosine")) c->schedule = HSI_SCHED_COSINE;
            else if (!strcmp(v, "constant")) c->schedule = HSI_SCHED_CONSTANT;
            else if (!strcmp(v, "step")) c->schedule = HSI_SCHED_STEP;
            else return hsi_cli_usage_error(cmd, "--schedule expects cosine, constant or step");
        } else if (!strcmp(argv[i], "--no-augment")) c->augment = 0;
        else if (hsi_cli_opt(argc, argv, &i, "--seed", &v)) {
            if (!hsi_cli_parse_int(cmd, "--seed", v, 0, 1LL << 62, &k)) return HSI_EXIT_USAGE;
            c->seed = (uint64_t)k;
        } else if (hsi_cli_opt(argc, argv, &i, "--workers", &v)) {
            if (!hsi_cli_parse_int(cmd, "--workers", v, 0, 64, &k)) return HSI_EXIT_USAGE;
            c->workers = (int)k;
        } else if (hsi_cli_opt(argc, argv, &i, "--prefetch", &v)) {
            if (!hsi_cli_parse_int(cmd, "--prefetch", v, 1, 64, &k)) return HSI_EXIT_USAGE;
            c->prefetch = (int)k;
        } else if (hsi_cli_opt(argc, argv, &i, "--threads", &v)) {
            if (!hsi_cli_parse_int(cmd, "--threads", v, 1, 256, &k)) return HSI_EXIT_USAGE;
            c->threads = (int)k;
        } else if (hsi_cli_opt(argc, argv, &i, "--device", &v)) { NEED("--device"); c->device = v; }
        else if (hsi_cli_opt(argc, argv, &i, "--conv", &v)) { NEED("--conv"); c->conv = v; }
        else if (!strcmp(argv[i], "--cuda-graph")) c->cuda_graph = 1;
        else if (!strcmp(argv[i], "--host-patches")) c->host_patches = 1;
        else if (hsi_cli_opt(argc, argv, &i, "--bn", &v)) {
            NEED("--bn");
            if (!strcmp(v, "sync")) c->bn_sync = 1;
            else if (!strcmp(v, "local")) c->bn_sync = 0;
            else return hsi_cli_usage_error(cmd, "--bn expects local or sync");
        } else if (!strcmp(argv[i], "--deterministic")) c->deterministic = 1;
        else if (!strcmp(argv[i], "--ddp")) c->ddp = 1;
        else if (!strcmp(argv[i], "--no-overlap")) c->no_overlap = 1;
        else if (hsi_cli_opt(argc, argv, &i, "--tile", &v)) {
            if (!hsi_cli_parse_int(cmd, "--tile", v, 1, 65536, &k)) return HSI_EXIT_USAGE;
            c->tile = (int)k;
        } else if (hsi_cli_opt(argc, argv, &i, "--bucket-mb", &v)) {
            if (!hsi_cli_parse_double(cmd, "--bucket-mb", v, &d)) return HSI_EXIT_USAGE;
            if (!(d > 0 && d <= 4096)) return hsi_cli_usage_error(cmd, "--bucket-mb must be in (0, 4096]");
            c->bucket_mb = d;
        } else if (hsi_cli_opt(argc, argv, &i, "--hash-every", &v)) {
            if (!hsi_cli_parse_int(cmd, "--hash-every", v, 0, 1 << 30, &k)) return HSI_EXIT_USAGE;
            c->hash_every = k == 0 ? -1 : (int)k;
        }
        else if (hsi_cli_opt(argc, argv, &i, "--mem-limit", &v)) {
            NEED("--mem-limit");
            if (!parse_size(cmd, "--mem-limit", v, &c->mem_limit)) return HSI_EXIT_USAGE;
        }
        else if (!strcmp(argv[i], "--resume")) c->resume = 1;
        else if (!strcmp(argv[i], "--overwrite")) c->overwrite = 1;
        else if (!strcmp(argv[i], "--quiet")) *quiet = 1;
        else if (argv[i][0] == '-' && argv[i][1]) return hsi_cli_usage_error(cmd, "unknown option '%s'", argv[i]);
        else if (npos < 2) pos[npos++] = argv[i];
        else return hsi_cli_usage_error(cmd, "too many arguments ('%s')", argv[i]);
#undef NEED
    }
    if (*list) return HSI_EXIT_OK;
    c->cube_path = pos[0];
    c->labels_path = pos[1];
    if (!c->cube_path) return hsi_cli_usage_error(cmd, "which cube? (hsi train CUBE LABELS --out DIR)");
    if (!!c->train_labels != !!c->test_labels)
        return hsi_cli_usage_error(cmd, "--train-labels and --test-labels go together");
    if (!c->labels_path && !c->train_labels)
        return hsi_cli_usage_error(cmd, "which labels? (hsi train CUBE LABELS --out DIR)");
    if (c->labels_path && c->train_labels)
        return hsi_cli_usage_error(cmd, "give LABELS or --train-labels/--test-labels, not both");
    if (!*out) return hsi_cli_usage_error(cmd, "--out DIR is required");
    c->out_dir = *out;
    /* --conv, --cuda-graph, --host-patches against --device cpu or cuda
     * (the trainer checks them against the device auto becomes) */
    hsi_device dev;
    if (hsi_device_parse(&dev, c->device, "--device") == HSI_OK &&
        hsi_train_device_options(c, dev) != HSI_OK)
        return hsi_cli_usage_error(cmd, "%s", hsi_last_error());
    return HSI_EXIT_OK;
}

/* --cuda-graph of predict and eval: refused with --device cpu. 1, else a
 * usage error has been printed. */
static int graph_device(const char *cmd, int graph, hsi_device dev)
{
    if (!graph || dev != HSI_DEVICE_CPU) return 1;
    hsi_cli_usage_error(cmd, "--cuda-graph runs the model's forward as a CUDA Graph: it needs "
                             "--device cuda (or auto)");
    return 0;
}

/* --conv of predict and eval for the device the prediction runs on (auto
 * resolved as hsi_run_predict does): the CPU engine's choice is set, the
 * GPU's returned in *gpu. 1, else a usage error has been printed. */
static int predict_conv(const char *cmd, const char *conv, hsi_device dev, hsi_gpu_conv *gpu)
{
    hsi_device on = dev;
    hsi_conv_impl cpu = HSI_CONV_IMPL_AUTO;
    if (on == HSI_DEVICE_AUTO) on = hsi_cuda_device_count() > 0 ? HSI_DEVICE_CUDA : HSI_DEVICE_CPU;
    if (hsi_conv_option(conv, on, &cpu, gpu) != HSI_OK) {
        hsi_cli_usage_error(cmd, "%s", hsi_last_error());
        return 0;
    }
    if (on == HSI_DEVICE_CPU && cpu != HSI_CONV_IMPL_AUTO) hsi_conv_set_impl(cpu);
    return 1;
}

static int list_models(void)
{
    printf("%-10s %12s  %s\n", "model", "parameters", "description (16 classes, default input)");
    for (const hsi_model_spec *s = hsi_model_list(); s && s->name; s++) {
        hsi_module *m = NULL;
        int patch = !strcmp(s->name, "hybridsn") ? 25 : !strcmp(s->name, "cnn1d") ? 1 : 11;
        long long n = -1;
        if (hsi_model_create(&m, s->name, 30, patch, 16, HSI_F32, 0) == HSI_OK) {
            n = (long long)hsi_module_param_count(m);
            hsi_module_free(m);
        }
        printf("%-10s %12lld  %s\n", s->name, n, s->summary);
    }
    return HSI_EXIT_OK;
}

/* The trainer's progress, as it comes. */
static int print_event(void *ctx, const hsi_train_event *ev)
{
    (void)ctx;
    fputs(ev->text, stdout);
    fflush(stdout);
    return 0;
}

/* plot: profile's bar chart to write (NULL: none). */
static int run_train_like(int argc, char **argv, const char *cmd, int profile, const char *plot)
{
    hsi_train_config c;
    hsi_train_config_init(&c);
    const char *out = NULL;
    int list = 0, quiet = 0;
    int rc = parse_train_args(&c, argc, argv, cmd, &out, &list, &quiet);
    if (rc != HSI_EXIT_OK) return rc;
    if (list) return list_models();
    int rank0 = hsi_dist_rank() == 0; /* under mpirun: rank 0 speaks for the job */
    if (!quiet && rank0) {
        c.progress = print_event;
        c.progress_bars = 1;
    }
    hsi_train_result res;
    hsi_status st = hsi_train_run(&c, &res);
    if (st != HSI_OK) return hsi_cli_fail(cmd, st);
    if (!rank0) return HSI_EXIT_OK;
    printf("\nOA %.2f %%  AA %.2f %%  kappa %.4f  (%lld test pixels)\n", 100 * res.oa, 100 * res.aa,
           res.kappa, (long long)res.n_test);
    printf("outputs in %s: model.safetensors preprocessing.safetensors pipeline.json metrics.json "
           "split.hdr map.hdr map.png history.csv report.html curves.png confusion.png spectra.png\n",
           c.out_dir);
    printf("report: %s/report.html\n", c.out_dir);
    printf("map picture: %s/map.png\n", c.out_dir);
    if (profile) {
        const hsi_train_profile *p = &res.prof;
        double step = p->forward + p->backward + p->optimizer + p->loader_wait;
        printf("\nstage            seconds   share\n");
        struct { const char *name; double s; } rows[] = {
            {"read", p->read}, {"split", p->split}, {"preprocess", p->preprocess},
            {"loader wait", p->loader_wait}, {"forward", p->forward}, {"backward", p->backward},
            {"optimizer", p->optimizer}, {"validate", p->validate}, {"predict", p->predict},
            {"write", p->write}};
        for (size_t i = 0; i < sizeof rows / sizeof *rows; i++)
            printf("%-14s %9.3f  %5.1f %%\n", rows[i].name, rows[i].s, 100 * rows[i].s / p->total);
        printf("%-14s %9.3f\n", "total", p->total);
        printf("training steps: %lld, %lld samples, %.0f samples/s, loader wait %.1f %% of step time\n",
               (long long)p->steps, (long long)p->train_samples, res.train_samples_per_s,
               step > 0 ? 100 * p->loader_wait / step : 0);
        if (p->ranks > 1)
            printf("data-parallel: %d ranks, %d bucket%s of %.2f MB of gradients, allreduce not "
                   "hidden by backward %.3f s (%.2f ms per step)%s\n",
                   p->ranks, p->n_buckets, p->n_buckets == 1 ? "" : "s", p->grad_bytes / 1e6,
                   p->comm_wait, p->steps ? 1e3 * p->comm_wait / (double)p->steps : 0,
                   p->tree > 0 ? " (deterministic tree sum included)" : "");
        cJSON *j = cJSON_CreateObject();
        for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) cJSON_AddNumberToObject(j, rows[i].name, rows[i].s);
        cJSON_AddNumberToObject(j, "total", p->total);
        cJSON_AddNumberToObject(j, "steps", (double)p->steps);
        cJSON_AddNumberToObject(j, "train_samples_per_s", res.train_samples_per_s);
        cJSON_AddNumberToObject(j, "ranks", p->ranks);
        cJSON_AddNumberToObject(j, "comm_wait", p->comm_wait + p->tree);
        char *s = cJSON_PrintUnformatted(j);
        printf("%s\n", s);
        char jp[4096];
        snprintf(jp, sizeof jp, "%s/profile.json", c.out_dir);
        FILE *fp = fopen(jp, "w");
        if (fp) {
            fprintf(fp, "%s\n", s);
            fclose(fp);
        }
        free(s);
        cJSON_Delete(j);
        if (plot) {
            if ((st = hsi_report_profile_png(plot, p)) != HSI_OK) return hsi_cli_fail(cmd, st);
            printf("bar chart: %s\n", plot);
        }
    }
    return HSI_EXIT_OK;
}

static int train_run(int argc, char **argv) { return run_train_like(argc, argv, "train", 0, NULL); }

HSI_CLI_COMMAND(train, {"train", "train a classifier on a labelled cube: metrics, map, model",
                        train_usage, train_run})

static int profile_run(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "train") != 0)
        return hsi_cli_usage_error("profile", "usage: hsi profile train CUBE LABELS --out DIR [train options]");
    /* --plot FILE.png is profile's own; the rest goes to train, checked
     * before any work (an existing FILE needs --overwrite) */
    const char *plot = NULL;
    int overwrite = 0, n = 0;
    char **args = calloc((size_t)argc, sizeof *args);
    if (!args) return hsi_cli_fail("profile", HSI_FAIL(HSI_ERR_NOMEM, "out of memory"));
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (hsi_cli_opt(argc, argv, &i, "--plot", &v)) {
            if (!v || !*v) {
                free(args);
                return hsi_cli_usage_error("profile", "--plot needs a file name (FILE.png)");
            }
            plot = v;
        } else {
            overwrite |= !strcmp(argv[i], "--overwrite");
            args[n++] = argv[i];
        }
    }
    if (plot) {
        size_t k = strlen(plot);
        const char *slash = strrchr(plot, '/');
        char dir[4096];
        struct stat sb;
        snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - plot + (slash == plot)) : 1, slash ? plot : ".");
        const char *why = k < 5 || strcasecmp(plot + k - 4, ".png") ? "must end in .png"
                          : stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode) ? "is in a folder that does not exist"
                                                                        : NULL;
        hsi_status st = why ? HSI_OK : hsi_cli_check_output(plot, NULL, NULL, overwrite);
        if (why || st != HSI_OK) {
            free(args);
            return why ? hsi_cli_usage_error("profile", "--plot %s: the picture %s", plot, why)
                       : hsi_cli_fail("profile", st);
        }
    }
    int rc = run_train_like(n, args, "profile train", 1, plot);
    free(args);
    return rc;
}

HSI_CLI_COMMAND(profile, {"profile", "per-stage timings of a job: hsi profile train ...",
                          "usage: hsi profile train CUBE LABELS --out DIR [hsi train options]\n"
                          "\n"
                          "Runs `hsi train` and prints the seconds spent per stage (read, split,\n"
                          "preprocess, loader wait, forward, backward, optimizer, validate,\n"
                          "predict, write) as a table and as JSON (also DIR/profile.json).\n"
                          "\n"
                          "  --plot FILE.png   the seconds per stage as a bar chart too (900 x 480;\n"
                          "                    an existing FILE is replaced only with --overwrite)\n",
                          profile_run})

static int predict_run(int argc, char **argv)
{
    const char *pos[3] = {NULL, NULL, NULL}, *var = NULL, *conv = "auto";
    int npos = 0, batch = 256, verbose = 1, overwrite = 0, graph = 0;
    hsi_device dev = HSI_DEVICE_CPU;
    hsi_gpu_conv gconv = HSI_GPU_CONV_AUTO;
    for (int i = 1; i < argc; i++) {
        const char *v;
        long long k;
        if (hsi_cli_opt(argc, argv, &i, "--device", &v)) {
            if (!hsi_cli_parse_device("predict", v, &dev)) return HSI_EXIT_USAGE;
        } else if (hsi_cli_opt(argc, argv, &i, "--conv", &v)) {
            if (!(conv = v)) return hsi_cli_usage_error("predict", "--conv needs auto, direct, gemm or cudnn");
        } else if (hsi_cli_opt(argc, argv, &i, "--var", &v)) {
            if (!(var = v)) return hsi_cli_usage_error("predict", "--var needs a variable name");
        } else if (hsi_cli_opt(argc, argv, &i, "--batch", &v)) {
            if (!hsi_cli_parse_int("predict", "--batch", v, 1, 65536, &k)) return HSI_EXIT_USAGE;
            batch = (int)k;
        } else if (!strcmp(argv[i], "--quiet")) verbose = 0;
        else if (!strcmp(argv[i], "--overwrite")) overwrite = 1;
        else if (!strcmp(argv[i], "--cuda-graph")) graph = 1;
        else if (argv[i][0] == '-' && argv[i][1]) return hsi_cli_usage_error("predict", "unknown option '%s'", argv[i]);
        else if (npos < 3) pos[npos++] = argv[i];
        else return hsi_cli_usage_error("predict", "too many arguments");
    }
    if (npos < 3) return hsi_cli_usage_error("predict", "need DIR CUBE OUT");
    if (!predict_conv("predict", conv, dev, &gconv) || !graph_device("predict", graph, dev)) return HSI_EXIT_USAGE;
    hsi_run run;
    hsi_cube cube;
    int32_t *map = NULL;
    hsi_status st = HSI_OK;
    memset(&run, 0, sizeof run);
    hsi_cube_init(&cube);
    HSI_TRY(hsi_cli_device_ready(dev));
    HSI_TRY(hsi_run_load(&run, pos[0]));
    HSI_TRY(hsi_cube_open(&cube, pos[1], &(hsi_open_options){var, 0}));
    HSI_TRY(hsi_cli_check_output(pos[2], cube.header_path, cube.data_path, overwrite));
    HSI_TRY(hsi_prep_check(&run.prep, &cube.view, pos[1]));
    const int64_t L = cube.view.shape[1], S = cube.view.shape[2];
    if (!(map = malloc((size_t)(L * S) * sizeof *map))) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    /* under mpirun every rank classifies its share of the tiles; rank 0 writes */
    hsi_predict_opts po = {.batch = batch, .progress_label = verbose ? "predict" : NULL, .across_ranks = 1,
                           .device = dev, .conv = gconv, .cuda_graph = graph};
    HSI_TRY(hsi_run_predict(&run, map, &cube.view, &po));
    if (hsi_dist_rank() == 0) HSI_TRY(hsi_run_write_map(&run, pos[2], map, L, S, &cube.meta));
cleanup:
    free(map);
    hsi_cube_free(&cube);
    hsi_run_free(&run);
    if (st != HSI_OK) return hsi_cli_fail("predict", st);
    if (hsi_dist_rank() == 0) printf("wrote %s\n", pos[2]);
    return HSI_EXIT_OK;
}

HSI_CLI_COMMAND(predict, {"predict", "classify every pixel of a cube with a trained model",
                          "usage: hsi predict DIR CUBE OUT [--var NAME] [--batch N] [--device cpu|cuda|auto]\n"
                          "                                [--conv auto|direct|gemm|cudnn] [--cuda-graph] [--quiet] [--overwrite]\n"
                          "\n"
                          "DIR is an `hsi train` output directory. The cube is preprocessed with\n"
                          "the fitted pipeline and classified in line tiles (memory holds one\n"
                          "tile of the preprocessed cube). OUT: .hdr (ENVI classification), .tif\n"
                          "(GeoTIFF with colour table) or .png (picture with legend). Under\n"
                          "mpirun -np N each rank classifies its share of the tiles (the same map\n"
                          "as one process); rank 0 writes it.\n"
                          "  --device cpu|cuda|auto   where it runs (default cpu). cuda: each tile's\n"
                          "                    fused pass, its patches and the model's forward on\n"
                          "                    the GPU (the features stay there), or an error saying\n"
                          "                    why not; auto: the GPU when there is one, else the CPU\n"
                          "  --conv auto|direct|gemm|cudnn   the model's convolutions, as for hsi\n"
                          "                    train (GPU auto: cuDNN when it loads, else gemm)\n"
                          "  --cuda-graph      GPU: each full batch's forward as one CUDA Graph launch\n"
                          "                    instead of one per kernel (the same map)\n",
                          predict_run})

static int eval_run(int argc, char **argv)
{
    const char *pos[3] = {NULL, NULL, NULL}, *var = NULL, *lvar = NULL, *json = NULL, *conv = "auto";
    int npos = 0, batch = 256, as_json = 0, overwrite = 0, graph = 0;
    hsi_eval_on on = HSI_EVAL_TEST;
    hsi_device dev = HSI_DEVICE_CPU;
    hsi_gpu_conv gconv = HSI_GPU_CONV_AUTO;
    for (int i = 1; i < argc; i++) {
        const char *v;
        long long k;
        if (hsi_cli_opt(argc, argv, &i, "--var", &v)) {
            if (!(var = v)) return hsi_cli_usage_error("eval", "--var needs a variable name");
        } else if (hsi_cli_opt(argc, argv, &i, "--labels-var", &v)) {
            if (!(lvar = v)) return hsi_cli_usage_error("eval", "--labels-var needs a variable name");
        } else if (!strcmp(argv[i], "--json")) {
            as_json = 1;
        } else if (hsi_cli_opt(argc, argv, &i, "--out", &v) || hsi_cli_opt(argc, argv, &i, "-o", &v)) {
            if (!(json = v) || !strcmp(v, "-"))
                return hsi_cli_usage_error("eval", "--out needs a file name (for stdout: --json)");
        } else if (!strcmp(argv[i], "--overwrite")) {
            overwrite = 1;
        } else if (!strcmp(argv[i], "--cuda-graph")) {
            graph = 1;
        } else if (hsi_cli_opt(argc, argv, &i, "--device", &v)) {
            if (!hsi_cli_parse_device("eval", v, &dev)) return HSI_EXIT_USAGE;
        } else if (hsi_cli_opt(argc, argv, &i, "--conv", &v)) {
            if (!(conv = v)) return hsi_cli_usage_error("eval", "--conv needs auto, direct, gemm or cudnn");
        } else if (hsi_cli_opt(argc, argv, &i, "--on", &v)) {
            if (!v || hsi_eval_on_parse(&on, v) != HSI_OK)
                return hsi_cli_usage_error("eval", "--on expects test, train or all");
        } else if (hsi_cli_opt(argc, argv, &i, "--batch", &v)) {
            if (!hsi_cli_parse_int("eval", "--batch", v, 1, 65536, &k)) return HSI_EXIT_USAGE;
            batch = (int)k;
        } else if (argv[i][0] == '-' && argv[i][1]) return hsi_cli_usage_error("eval", "unknown option '%s'", argv[i]);
        else if (npos < 3) pos[npos++] = argv[i];
        else return hsi_cli_usage_error("eval", "too many arguments");
    }
    if (npos < 3) return hsi_cli_usage_error("eval", "need DIR CUBE LABELS");
    if (!predict_conv("eval", conv, dev, &gconv) || !graph_device("eval", graph, dev)) return HSI_EXIT_USAGE;
    hsi_run run;
    hsi_cube cube;
    hsi_labels lab;
    hsi_metrics mt;
    int have_mt = 0;
    int32_t *map = NULL;
    int64_t unknown = 0;
    hsi_status st = HSI_OK;
    memset(&run, 0, sizeof run);
    hsi_cube_init(&cube);
    hsi_labels_init(&lab);
    HSI_TRY(hsi_cli_device_ready(dev));
    HSI_TRY(hsi_run_load(&run, pos[0]));
    HSI_TRY(hsi_cube_open(&cube, pos[1], &(hsi_open_options){var, 0}));
    HSI_TRY(hsi_prep_check(&run.prep, &cube.view, pos[1]));
    HSI_TRY(hsi_labels_open(&lab, pos[2], lvar));
    if (json) HSI_TRY(hsi_cli_check_output(json, cube.header_path, cube.data_path, overwrite));
    const int64_t L = cube.view.shape[1], S = cube.view.shape[2];
    if (lab.map.shape[0] != L || lab.map.shape[1] != S) {
        st = HSI_FAIL(HSI_ERR_ARG, "%s is %lld x %lld but the cube is %lld x %lld", pos[2],
                      (long long)lab.map.shape[0], (long long)lab.map.shape[1], (long long)L,
                      (long long)S);
        goto cleanup;
    }
    st = hsi_run_eval_check(&run, on, L, S); /* before the prediction */
    if (st != HSI_OK) {
        hsi_fail_context(st, "%s", pos[0]);
        goto cleanup;
    }
    if (!(map = malloc((size_t)(L * S) * sizeof *map))) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    hsi_predict_opts po = {.batch = batch, .progress_label = "predict", .across_ranks = 1, .device = dev,
                           .conv = gconv, .cuda_graph = graph};
    HSI_TRY(hsi_run_predict(&run, map, &cube.view, &po));
    if (hsi_dist_rank() != 0) goto cleanup; /* rank 0 scores and prints */
    HSI_TRY(hsi_run_evaluate(&run, &mt, map, &lab.map, on, &unknown));
    have_mt = 1;
    if (unknown)
        hsi_warn("%lld labelled pixels have classes the model was not trained on; not scored",
                 (long long)unknown);
    static const char *const on_text[] = {"the training split's test pixels", "every labelled pixel",
                                          "the training split's training pixels (not an honest figure)"};
    if (!as_json) {
        printf("scored: %s (%lld pixels)\n", on_text[on], (long long)mt.n);
        hsi_metrics_print(&mt, stdout, (const char *const *)run.names, run.label_ids, 1);
    }
    if (json || as_json) {
        cJSON *j = hsi_run_metrics_json(&run, &mt, on, unknown);
        char *s = j ? cJSON_Print(j) : NULL;
        cJSON_Delete(j);
        if (!s) {
            st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        if (as_json) puts(s);
        if (json) st = hsi_write_file_atomic(json, s, strlen(s));
        free(s);
        if (st != HSI_OK) goto cleanup;
    }
cleanup:
    if (have_mt) hsi_metrics_free(&mt);
    free(map);
    hsi_labels_free(&lab);
    hsi_cube_free(&cube);
    hsi_run_free(&run);
    if (st != HSI_OK) return hsi_cli_fail("eval", st);
    return HSI_EXIT_OK;
}

HSI_CLI_COMMAND(eval, {"eval", "score a trained model on a labelled cube",
                       "usage: hsi eval DIR CUBE LABELS [--on test|train|all] [--var NAME]\n"
                       "                [--labels-var NAME] [--json] [--out FILE.json] [--overwrite]\n"
                       "                [--batch N] [--device cpu|cuda|auto] [--conv auto|direct|gemm|cudnn]\n"
                       "                [--cuda-graph]\n"
                       "\n"
                       "Predicts the scene and prints OA, AA, kappa, per-class recall,\n"
                       "precision, F1 and the confusion matrix (under mpirun -np N the ranks\n"
                       "share the prediction's tiles; rank 0 scores and prints).\n"
                       "  --on test  (default) only the pixels the training split held out for\n"
                       "             testing (DIR/split.hdr): the honest figure, equal to\n"
                       "             DIR/metrics.json on the training scene\n"
                       "  --on all   every labelled pixel of LABELS (another scene; on the\n"
                       "             training scene this scores the training pixels too)\n"
                       "  --on train only the training pixels (how well the model fits them)\n"
                       "  --json     print the metrics as JSON on stdout (and nothing else there)\n"
                       "  --out F    also write them to F as JSON (-o F)\n"
                       "  --device D where the prediction runs, as for hsi predict\n"
                       "  --conv C   the model's convolutions, as for hsi predict\n"
                       "  --cuda-graph  the GPU's forwards as CUDA Graphs, as for hsi predict\n",
                       eval_run})
