/* Operators and the fused executor against their scalar references.
 *
 *  - reference operators on hand-checked values (RAP digest §3.8 rules);
 *  - SigridHash against golden values from an independent Python statement
 *    (dev/sigrid_golden.py), and the multiply-shift floor-mod against `%` on random and
 *    extreme inputs;
 *  - the fused executor (exec.c) against the row-at-a-time reference (exec_ref.c) on random
 *    specs over random raw blocks: lists of length 0..200, ids over the whole 64-bit range,
 *    NaN and inf flowing through the float ops, several inputs concatenated, nodes shared by
 *    several outputs, blocks split at arbitrary rows;
 *  - the Categorify counting pass against a brute-force count.
 */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "prep_internal.h"
#include "rectrain/core.h"
#include "rectrain/prep.h"

/* ---- reference operators ------------------------------------------------------------------ */

static void test_ref_ops(void) {
    CHECK(rec_ref_logit(0.5, 1e-5) == 0.0, "logit(0.5)");
    CHECK(fabs(rec_ref_logit(0.0, 1e-5) - log(1e-5 / (1 - 1e-5))) < 1e-12, "logit clamps at eps");
    CHECK(fabs(rec_ref_logit(7.0, 1e-5) + log(1e-5 / (1 - 1e-5))) < 1e-9, "logit clamps at 1-eps");
    CHECK(isnan(rec_ref_logit(NAN, 1e-5)), "logit(NaN) stays NaN");
    CHECK(rec_ref_boxcox(-3.0, 0.5) == -3.0 && rec_ref_boxcox(0.0, 0.5) == 0.0, "boxcox x<=0 unchanged");
    CHECK(fabs(rec_ref_boxcox(4.0, 0.5) - 2.0) < 1e-12, "boxcox (4^0.5-1)/0.5 = 2");
    CHECK(rec_ref_boxcox(M_E, 0.0) == log(M_E), "boxcox lambda 0 is log");
    CHECK(isinf(rec_ref_boxcox(INFINITY, 2.0)), "boxcox(inf)");
    CHECK(rec_ref_log1p(0.0) == 0.0 && isnan(rec_ref_log1p(-2.0)) && isinf(rec_ref_log1p(-1.0)),
          "log1p edge cases");
    CHECK((float)rec_ref_log1p(6.0) == 0x1.f2272ap+0f, "log1p(6) rounds log(7) correctly (%a; the C library's log1pf "
          "gives %a)", (float)rec_ref_log1p(6.0), log1pf(6.0f));
    float oh[4];
    rec_ref_onehot(0.6, 0.0, 1.0, 4, oh); /* step 0.25 -> idx 2 */
    CHECK(oh[0] == 0 && oh[1] == 0 && oh[2] == 1 && oh[3] == 0, "onehot idx 2");
    rec_ref_onehot(5.0, 0.0, 1.0, 4, oh);
    CHECK(oh[0] == 1 && oh[3] == 0, "onehot out of range -> class 0");
    rec_ref_onehot(NAN, 0.0, 1.0, 4, oh);
    CHECK(oh[0] == 1, "onehot NaN -> class 0");
    const double b[] = {0.5, 1.0, 1.0, 1.5};
    CHECK(rec_ref_bucketize(0.2, b, 4) == 0, "below all borders");
    CHECK(rec_ref_bucketize(0.5, b, 4) == 0, "equal to the first border");
    CHECK(rec_ref_bucketize(0.7, b, 4) == 1, "between borders");
    CHECK(rec_ref_bucketize(1.0, b, 4) == 2, "a repeated border puts equal values up");
    CHECK(rec_ref_bucketize(9.0, b, 4) == 4, "above all borders -> |borders|");
    CHECK(rec_ref_modulo(-1, 7) == 6 && rec_ref_modulo(13, 7) == 6 && rec_ref_modulo(INT64_MIN, 3) == 1,
          "floor modulo");
    const int64_t map[] = {5, 6, 7};
    CHECK(rec_ref_map_id(1, map, 3) == 6 && rec_ref_map_id(3, map, 3) == 0 && rec_ref_map_id(-1, map, 3) == 0,
          "map_id");
    CHECK(rec_twang_mix64(0) != 0 && rec_twang_mix64(1) != rec_twang_mix64(2), "twang mixes");
    CHECK(rec_op_kind_from_name("sigrid_hash") == REC_OP_SIGRID_HASH && rec_op_kind_from_name("nope") == -1,
          "op names");
    for (int k = 0; k < REC_OP_COUNT; k++)
        CHECK(rec_op_kind_from_name(rec_op_name((rec_op_kind)k)) == k, "op name round trip %d", k);
}

/* ---- SigridHash -------------------------------------------------------------------------- */

static const int64_t SIGRID_GOLDEN[][4] = {
    {INT64_C(0), INT64_C(-7), INT64_C(1), INT64_C(0)},
    {INT64_C(1), INT64_C(1), INT64_C(1), INT64_C(0)},
    {INT64_C(-1), INT64_C(4611686018427400249), INT64_C(1), INT64_C(0)},
    {INT64_C(9223372036854775807), INT64_C(0), INT64_C(1), INT64_C(0)},
    {INT64_MIN, INT64_C(0), INT64_C(1), INT64_C(0)},
    {INT64_C(3735928559), INT64_C(0), INT64_C(1), INT64_C(0)},
    {INT64_C(0), INT64_C(-7), INT64_C(2), INT64_C(0)},
    {INT64_C(1), INT64_C(0), INT64_C(2), INT64_C(0)},
    {INT64_C(-1), INT64_C(1), INT64_C(2), INT64_C(1)},
    {INT64_C(9223372036854775807), INT64_C(0), INT64_C(2), INT64_C(1)},
    {INT64_MIN, INT64_C(0), INT64_C(2), INT64_C(1)},
    {INT64_C(3735928559), INT64_C(4611686018427400249), INT64_C(2), INT64_C(1)},
    {INT64_C(0), INT64_C(4611686018427400249), INT64_C(3), INT64_C(0)},
    {INT64_C(1), INT64_C(0), INT64_C(3), INT64_C(2)},
    {INT64_C(-1), INT64_C(1), INT64_C(3), INT64_C(2)},
    {INT64_C(9223372036854775807), INT64_C(0), INT64_C(3), INT64_C(1)},
    {INT64_MIN, INT64_C(4611686018427400249), INT64_C(3), INT64_C(1)},
    {INT64_C(3735928559), INT64_C(0), INT64_C(3), INT64_C(1)},
    {INT64_C(0), INT64_C(0), INT64_C(7), INT64_C(6)},
    {INT64_C(1), INT64_C(1), INT64_C(7), INT64_C(1)},
    {INT64_C(-1), INT64_C(0), INT64_C(7), INT64_C(4)},
    {INT64_C(9223372036854775807), INT64_C(4611686018427400249), INT64_C(7), INT64_C(1)},
    {INT64_MIN, INT64_C(0), INT64_C(7), INT64_C(3)},
    {INT64_C(3735928559), INT64_C(1), INT64_C(7), INT64_C(6)},
    {INT64_C(0), INT64_C(0), INT64_C(1460), INT64_C(346)},
    {INT64_C(1), INT64_C(1), INT64_C(1460), INT64_C(347)},
    {INT64_C(-1), INT64_C(-7), INT64_C(1460), INT64_C(1109)},
    {INT64_C(9223372036854775807), INT64_C(4611686018427400249), INT64_C(1460), INT64_C(675)},
    {INT64_MIN, INT64_C(1), INT64_C(1460), INT64_C(136)},
    {INT64_C(3735928559), INT64_C(0), INT64_C(1460), INT64_C(255)},
    {INT64_C(0), INT64_C(-7), INT64_C(10131227), INT64_C(2916777)},
    {INT64_C(1), INT64_C(1), INT64_C(10131227), INT64_C(9490786)},
    {INT64_C(-1), INT64_C(0), INT64_C(10131227), INT64_C(6975913)},
    {INT64_C(9223372036854775807), INT64_C(1), INT64_C(10131227), INT64_C(7288361)},
    {INT64_MIN, INT64_C(-7), INT64_C(10131227), INT64_C(9715308)},
    {INT64_C(3735928559), INT64_C(0), INT64_C(10131227), INT64_C(1243979)},
    {INT64_C(0), INT64_C(0), INT64_C(1048576), INT64_C(779350)},
    {INT64_C(1), INT64_C(0), INT64_C(1048576), INT64_C(526608)},
    {INT64_C(-1), INT64_C(1), INT64_C(1048576), INT64_C(960057)},
    {INT64_C(9223372036854775807), INT64_C(4611686018427400249), INT64_C(1048576), INT64_C(80379)},
    {INT64_MIN, INT64_C(4611686018427400249), INT64_C(1048576), INT64_C(613382)},
    {INT64_C(3735928559), INT64_C(-7), INT64_C(1048576), INT64_C(194463)},
    {INT64_C(0), INT64_C(4611686018427400249), INT64_C(2147483647), INT64_C(756694078)},
    {INT64_C(1), INT64_C(4611686018427400249), INT64_C(2147483647), INT64_C(1261140362)},
    {INT64_C(-1), INT64_C(-7), INT64_C(2147483647), INT64_C(1925900467)},
    {INT64_C(9223372036854775807), INT64_C(-7), INT64_C(2147483647), INT64_C(711500442)},
    {INT64_MIN, INT64_C(1), INT64_C(2147483647), INT64_C(709252501)},
    {INT64_C(3735928559), INT64_C(1), INT64_C(2147483647), INT64_C(1071405468)},
    {INT64_C(0), INT64_C(1), INT64_C(1000000000039), INT64_C(530208940984)},
    {INT64_C(1), INT64_C(0), INT64_C(1000000000039), INT64_C(336693665252)},
    {INT64_C(-1), INT64_C(-7), INT64_C(1000000000039), INT64_C(58031639898)},
    {INT64_C(9223372036854775807), INT64_C(4611686018427400249), INT64_C(1000000000039), INT64_C(659294745890)},
    {INT64_MIN, INT64_C(-7), INT64_C(1000000000039), INT64_C(718822401744)},
    {INT64_C(3735928559), INT64_C(4611686018427400249), INT64_C(1000000000039), INT64_C(988691286113)},
    {INT64_C(-1444410380151640190), INT64_C(3103034916813070836), INT64_C(645170909285755), INT64_C(571892003608243)},
    {INT64_C(1740816960299813499), INT64_C(5476690359863214875), INT64_C(54), INT64_C(36)},
    {INT64_C(8202918413664118839), INT64_C(-1002750821430351451), INT64_C(124839176387152), INT64_C(80371469332775)},
    {INT64_C(-2822254768612912354), INT64_C(-706597217950083019), INT64_C(2503), INT64_C(203)},
    {INT64_C(-116343679928894088), INT64_C(4948025256206694139), INT64_C(757), INT64_C(640)},
    {INT64_C(-1883455377138012285), INT64_C(6851526104477628370), INT64_C(22), INT64_C(16)},
    {INT64_C(7072183418114570015), INT64_C(8973733738937638733), INT64_C(13386915673606), INT64_C(7751120563093)},
    {INT64_C(-4966757905636401315), INT64_C(-5972728649860875222), INT64_C(43157), INT64_C(38976)},
    {INT64_C(-9000847795971954198), INT64_C(1644038575953710126), INT64_C(73907), INT64_C(27243)},
    {INT64_C(-6536116905033578663), INT64_C(-1985258800932950328), INT64_C(52897894), INT64_C(31139570)},
    {INT64_C(-8075102392426469242), INT64_C(8940539219407647101), INT64_C(174271722), INT64_C(163128115)},
    {INT64_C(-7334801799054518179), INT64_C(8281642823476416924), INT64_C(154728348155), INT64_C(65729485576)},
    {INT64_C(8401902144635270878), INT64_C(-2505742295095117809), INT64_C(60), INT64_C(23)},
    {INT64_C(-627383705726182493), INT64_C(-3470712088557742453), INT64_C(210), INT64_C(47)},
    {INT64_C(521256991981020429), INT64_C(6702163916888618658), INT64_C(18377501262071), INT64_C(10856990184079)},
    {INT64_C(49751302480077856), INT64_C(6504853222885255938), INT64_C(107261), INT64_C(55376)},
    {INT64_C(9031592083536428598), INT64_C(-4069009703114052730), INT64_C(50763), INT64_C(8537)},
    {INT64_C(-7737705760559675643), INT64_C(-5038805070873429879), INT64_C(5534), INT64_C(269)},
    {INT64_C(-9188169845631956885), INT64_C(2821946869184284483), INT64_C(7340463229676), INT64_C(5489656274364)},
    {INT64_C(-5546578070581201774), INT64_C(-5930227509758641730), INT64_C(379385272570), INT64_C(126892870313)},
    {INT64_C(-1921440555493392006), INT64_C(4146803440187425935), INT64_C(4068), INT64_C(1434)},
    {INT64_C(-8715185419877771724), INT64_C(7468202974930499974), INT64_C(5377926868474), INT64_C(2404465430212)},
    {INT64_C(-6807146312784645793), INT64_C(2761010336259859292), INT64_C(33283832854), INT64_C(30350993938)},
    {INT64_C(-5330327931279877107), INT64_C(-5298277646743355638), INT64_C(13918010701), INT64_C(9571282362)},
    {INT64_C(-3209930727695007987), INT64_C(30417670831582028), INT64_C(35011870684), INT64_C(32873321260)},
    {INT64_C(5100638368743294636), INT64_C(-6460003926445494458), INT64_C(970), INT64_C(130)},
    {INT64_C(4154082673314065207), INT64_C(-8084188060063551521), INT64_C(18672449126485), INT64_C(5338683321028)},
    {INT64_C(-8175180575755234977), INT64_C(-4115153644608196520), INT64_C(1143269174400402), INT64_C(279595435968062)},
    {INT64_C(1138706195591318828), INT64_C(-1046882360979033931), INT64_C(1112282112826), INT64_C(182050254225)},
    {INT64_C(224339677915371200), INT64_C(-4110201287464267347), INT64_C(15175345385), INT64_C(10044905217)},
    {INT64_C(6271889001747896191), INT64_C(-1537774900434223596), INT64_C(59340086), INT64_C(34553757)},
    {INT64_C(-1321918059965153159), INT64_C(3126209307288458926), INT64_C(460), INT64_C(12)},
    {INT64_C(-6585875070265184221), INT64_C(-7487064003649777790), INT64_C(4994167206), INT64_C(816236770)},
    {INT64_C(6132521798936762867), INT64_C(3805997712564147952), INT64_C(6029316968), INT64_C(4824024021)},
    {INT64_C(-5612520229602539914), INT64_C(-8863975403951288211), INT64_C(62099518090), INT64_C(45962195751)},
    {INT64_C(-8889818383931819387), INT64_C(5319359537397233825), INT64_C(22), INT64_C(0)},
    {INT64_C(-4207324827872393945), INT64_C(5146594301767645686), INT64_C(396245), INT64_C(264524)},
    {INT64_C(5898849453731384731), INT64_C(8227276636604111671), INT64_C(20047827), INT64_C(576129)},
    {INT64_C(-7573085608500169865), INT64_C(2479971214077924724), INT64_C(21953), INT64_C(7812)},
    {INT64_C(6571258536237564897), INT64_C(-852728016220568918), INT64_C(8340843), INT64_C(5233133)},
};

static int64_t floor_mod(int64_t x, int64_t d) {
    int64_t r = x % d;
    return r < 0 ? r + d : r;
}

static void test_sigrid(void) {
    int n = (int)(sizeof SIGRID_GOLDEN / sizeof SIGRID_GOLDEN[0]), bad = 0;
    for (int i = 0; i < n; i++) {
        const int64_t *g = SIGRID_GOLDEN[i];
        int64_t got = rec_ref_sigrid_hash(g[0], g[1], g[2]);
        if (got != g[3] && bad++ < 5)
            CHECK(0, "sigrid_hash(%" PRId64 ", %" PRId64 ", %" PRId64 ") = %" PRId64 ", want %" PRId64,
                  g[0], g[1], g[2], got, g[3]);
    }
    CHECK(bad == 0, "%d of %d sigrid golden values differ", bad, n);

    /* The multiply-shift remainder is the floor-mod for every x and every d >= 2. */
    rec_rng rng;
    rec_rng_seed(&rng, 11, 0);
    const int64_t xs[] = {0, 1, -1, INT64_MAX, INT64_MIN, INT64_MIN + 1, INT64_MAX - 1};
    int64_t mismatches = 0, tried = 0;
    for (int t = 0; t < 20000; t++) {
        int bits = 1 + (int)rec_rng_below(&rng, 62);
        int64_t d = (int64_t)(rec_rng_u64(&rng) >> (64 - bits));
        if (t % 5 == 0) d = (int64_t)1 << (int)rec_rng_below(&rng, 63);
        if (t == 1) d = INT64_MAX;
        if (d < 2) d = 2;
        uint64_t mult;
        int shift;
        rec_sigrid_magic(d, &mult, &shift);
        for (int k = 0; k < 57; k++) {
            int64_t x = k < 7 ? xs[k] : (int64_t)rec_rng_u64(&rng);
            if (k >= 50) x = (int64_t)(rec_rng_u64(&rng) >> (int)rec_rng_below(&rng, 64)) * (k & 1 ? -1 : 1);
            tried++;
            if (rec_g_floor_mod(x, d, mult, shift) != floor_mod(x, d) && mismatches++ < 5)
                CHECK(0, "floor_mod_magic(%" PRId64 ", %" PRId64 ") = %" PRId64 ", want %" PRId64, x, d,
                      rec_g_floor_mod(x, d, mult, shift), floor_mod(x, d));
        }
    }
    CHECK(mismatches == 0, "%" PRId64 " of %" PRId64 " multiply-shift remainders wrong", mismatches, tried);
}

/* ---- random specs -------------------------------------------------------------------------- */

typedef struct sbuf {
    char *p;
    size_t len, cap;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) {
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (b->p && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        b->cap = (b->cap + (size_t)n + 1) * 2;
        b->p = realloc(b->p, b->cap);
        if (!b->p) abort();
    }
}

static int64_t rnd(rec_rng *r, int64_t lo, int64_t hi) { return lo + (int64_t)rec_rng_below(r, (uint64_t)(hi - lo + 1)); }

/* Appends a float chain (input already i64 scalar nullable from an I column) ending in f32,
 * non-nullable; may end with onehot. */
static void dense_ops(sbuf *b, rec_rng *r) {
    int fill_first = (int)rec_rng_below(r, 2);
    if (fill_first) sb_printf(b, "{\"op\":\"fill_null\",\"value\":%d}", (int)rnd(r, -3, 3));
    if (fill_first && rec_rng_below(r, 2))
        sb_printf(b, ",{\"op\":\"clamp\",\"min\":%d}", (int)rnd(r, -5, 0));
    sb_printf(b, "%s{\"op\":\"cast\",\"to\":\"f32\"}", fill_first ? "," : "");
    if (!fill_first) sb_printf(b, ",{\"op\":\"fill_null\",\"value\":%.3f}", rec_rng_uniform(r) * 4 - 2);
    int n = (int)rnd(r, 0, 4);
    for (int k = 0; k < n; k++) {
        switch (rec_rng_below(r, 4)) {
        case 0: sb_printf(b, ",{\"op\":\"log1p\"}"); break; /* NaN below -1, -inf at -1 */
        case 1: sb_printf(b, ",{\"op\":\"logit\",\"eps\":%g}", rec_rng_below(r, 2) ? 1e-5 : 0.01); break;
        case 2: sb_printf(b, ",{\"op\":\"boxcox\",\"lambda\":%g}", (double)rnd(r, 0, 6) / 2); break; /* inf */
        default: sb_printf(b, ",{\"op\":\"clamp\",\"min\":%g,\"max\":%g}", -rec_rng_uniform(r) * 5,
                           rec_rng_uniform(r) * 50); break;
        }
    }
    if (rec_rng_below(r, 3) == 0)
        sb_printf(b, ",{\"op\":\"onehot\",\"num_class\":%d,\"min\":%g,\"max\":%g}", (int)rnd(r, 1, 9),
                  -rec_rng_uniform(r), 1 + 10 * rec_rng_uniform(r));
}

/* Appends 0..4 id ops to a list/scalar chain that is already non-nullable. Returns nothing;
 * the caller ends the chain with a bounding op. */
static void id_ops(sbuf *b, rec_rng *r, int is_list) {
    int n = (int)rnd(r, 0, 4);
    for (int k = 0; k < n; k++) {
        switch (rec_rng_below(r, is_list ? 6 : 4)) {
        case 0: sb_printf(b, ",{\"op\":\"sigrid_hash\",\"salt\":%" PRId64 ",\"max_value\":%" PRId64 "}",
                          rnd(r, -1000000, 1000000), rnd(r, 1, (int64_t)1 << 40)); break;
        case 1: sb_printf(b, ",{\"op\":\"clamp\",\"min\":%" PRId64 ",\"max\":%" PRId64 "}", -rnd(r, 0, 1 << 20),
                          rnd(r, 0, (int64_t)1 << 50)); break;
        case 2: {
            int len = (int)rnd(r, 1, 40);
            sb_printf(b, ",{\"op\":\"map_id\",\"map\":[");
            for (int i = 0; i < len; i++) sb_printf(b, "%s%d", i ? "," : "", (int)rnd(r, 0, 1000));
            sb_printf(b, "]}");
            break;
        }
        case 3: sb_printf(b, ",{\"op\":\"modulo\",\"divisor\":%" PRId64 "}", rnd(r, 1, (int64_t)1 << 45)); break;
        case 4: sb_printf(b, ",{\"op\":\"firstx\",\"x\":%d}", (int)rnd(r, 1, 6)); break;
        default: sb_printf(b, ",{\"op\":\"ngram\",\"n\":%d}", (int)rnd(r, 1, 4)); break;
        }
    }
}

static const char *raw_name(int c) { return rec_criteo_column_name(c); }

/* A random valid spec: dense chains over I columns, sparse chains over C columns (single or
 * several inputs), a shared node feeding two outputs, a bucketized dense value, and
 * categorify tables when `vocab` is set. */
static char *random_spec(rec_rng *r, int vocab) {
    sbuf b = {0};
    sb_printf(&b, "{\"format\":\"rectrain-prep\",\"version\":1,\"name\":\"random\",\"tables\":{");
    int n_sparse = (int)rnd(r, 1, 7);
    for (int f = 0; f < n_sparse + 2; f++)
        sb_printf(&b, "%s\"t%d\":{\"rows\":%s}", f ? "," : "", f, vocab && f == 0 ? "\"auto\"" : "1000000000000");
    sb_printf(&b, "},\"nodes\":[{\"name\":\"shared\",\"input\":\"C%d\",\"ops\":[{\"op\":\"fill_null\",\"value\":7}",
              (int)rnd(r, 1, 26));
    id_ops(&b, r, 1);
    sb_printf(&b, "]}],\"dense\":[");
    int n_dense = (int)rnd(r, 1, 6);
    for (int i = 0; i < n_dense; i++) {
        sb_printf(&b, "%s{\"name\":\"d%d\",\"input\":\"%s\",\"ops\":[", i ? "," : "", i, raw_name((int)rnd(r, 1, 13)));
        dense_ops(&b, r);
        sb_printf(&b, "]}");
    }
    sb_printf(&b, "],\"sparse\":[");
    for (int f = 0; f < n_sparse; f++) {
        sb_printf(&b, "%s{\"name\":\"s%d\",", f ? "," : "", f);
        int kind = (int)rec_rng_below(r, 3);
        if (kind == 0) {
            sb_printf(&b, "\"input\":\"%s\"", raw_name((int)rnd(r, 14, 39)));
        } else {
            int k = (int)rnd(r, 2, 4);
            sb_printf(&b, "\"inputs\":[");
            for (int i = 0; i < k; i++) sb_printf(&b, "%s\"%s\"", i ? "," : "", raw_name((int)rnd(r, 1, 39)));
            sb_printf(&b, "]");
        }
        sb_printf(&b, ",\"ops\":[{\"op\":\"fill_null\",\"value\":%d}", (int)rnd(r, -2, 2));
        id_ops(&b, r, 1);
        if (vocab && f == 0)
            sb_printf(&b, ",{\"op\":\"categorify\",\"min_count\":%d}", (int)rnd(r, 1, 3));
        else
            sb_printf(&b, ",{\"op\":\"modulo\",\"divisor\":%" PRId64 "}", rnd(r, 1, 1000000));
        sb_printf(&b, "],\"table\":\"t%d\"}", f);
    }
    /* The shared node feeds two outputs; a bucketized float feeds a third. */
    sb_printf(&b, ",{\"name\":\"u0\",\"input\":\"shared\",\"ops\":[{\"op\":\"firstx\",\"x\":%d},"
                  "{\"op\":\"sigrid_hash\",\"salt\":%d,\"max_value\":%d}],\"table\":\"t%d\"}",
              (int)rnd(r, 1, 3), (int)rnd(r, 0, 99), (int)rnd(r, 1, 100000), n_sparse);
    sb_printf(&b, ",{\"name\":\"u1\",\"input\":\"shared\",\"ops\":[{\"op\":\"ngram\",\"n\":2},"
                  "{\"op\":\"modulo\",\"divisor\":977}],\"table\":\"t%d\"}", n_sparse + 1);
    sb_printf(&b, ",{\"name\":\"bk\",\"input\":\"%s\",\"ops\":[{\"op\":\"fill_null\",\"value\":0},"
                  "{\"op\":\"cast\",\"to\":\"f32\"},{\"op\":\"log1p\"},{\"op\":\"bucketize\",\"borders\":[0,0.5,1,1,2.5,4]}],"
                  "\"table\":\"t%d\"}",
              raw_name((int)rnd(r, 1, 13)), n_sparse + 1);
    sb_printf(&b, "]}");
    return b.p;
}

/* ---- random raw blocks ----------------------------------------------------------------------- */

static int64_t random_int(rec_rng *r) {
    switch (rec_rng_below(r, 8)) {
    case 0: return (int64_t)rec_rng_u64(r);              /* anywhere in int64 */
    case 1: return -(int64_t)rec_rng_below(r, 5);        /* small negatives, -1 included */
    case 2: return rec_rng_below(r, 2) ? INT64_MAX : INT64_MIN;
    default: return (int64_t)rec_rng_below(r, 1000);
    }
}

static int64_t random_id(rec_rng *r) {
    switch (rec_rng_below(r, 4)) {
    case 0: return (int64_t)rec_rng_u64(r);              /* huge: 16 hex digits */
    case 1: return (int64_t)rec_rng_below(r, 1u << 31) * (rec_rng_below(r, 2) ? 1 : -1);
    default: return (int64_t)rec_rng_below(r, 50);       /* frequent ids for categorify */
    }
}

static rec_status random_block(rec_raw_block *b, rec_rng *r, int64_t n) {
    REC_TRY(rec_raw_block_init(b, n));
    b->n = n;
    b->has_label = 1;
    for (int64_t i = 0; i < n; i++) b->label[i] = (float)rec_rng_below(r, 2);
    for (int c = 0; c < REC_CRITEO_NINT; c++)
        for (int64_t i = 0; i < n; i++) {
            int null = rec_rng_below(r, 5) == 0;
            b->int_null[c * n + i] = (uint8_t)null;
            b->ints[c * n + i] = null ? 0 : random_int(r);
        }
    for (int c = 0; c < REC_CRITEO_NCAT; c++) {
        rec_raw_list *l = &b->cat[c];
        l->off[0] = 0;
        for (int64_t i = 0; i < n; i++) {
            int null = rec_rng_below(r, 6) == 0;
            int64_t len = 0;
            if (!null) {
                uint64_t u = rec_rng_below(r, 10);
                len = u < 6 ? 1 : u < 8 ? (int64_t)rec_rng_below(r, 8) : (int64_t)rec_rng_below(r, 201);
            }
            REC_TRY(rec_raw_list_reserve(l, l->off[i] + len));
            for (int64_t k = 0; k < len; k++) l->val[l->off[i] + k] = random_id(r);
            l->null[i] = (uint8_t)null;
            l->off[i + 1] = (int32_t)(l->off[i] + len);
        }
    }
    return REC_OK;
}

/* ---- executor vs reference ------------------------------------------------------------------- */

static int same_float(float a, float b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    return memcmp(&a, &b, sizeof a) == 0 || (a == 0 && b == 0);
}

/* Compares two batches exactly: labels, dense values (bitwise, NaN == NaN), offsets, ids.
 * Returns 1 when equal; reports the first difference. */
static int same_batch(const rec_batch *x, const rec_batch *y, const rec_spec *s, const char *what) {
    if (x->n != y->n) { CHECK(0, "%s: %lld vs %lld rows", what, (long long)x->n, (long long)y->n); return 0; }
    for (int64_t i = 0; i < x->n; i++)
        if (x->label[i] != y->label[i]) { CHECK(0, "%s: label row %lld", what, (long long)i); return 0; }
    for (int64_t i = 0; i < x->n * x->n_dense; i++)
        if (!same_float(x->dense[i], y->dense[i])) {
            CHECK(0, "%s: dense row %lld col %lld: %.9g vs %.9g", what, (long long)(i / x->n_dense),
                  (long long)(i % x->n_dense), x->dense[i], y->dense[i]);
            return 0;
        }
    for (int32_t f = 0; f < x->n_sparse; f++) {
        const rec_jagged *a = &x->sparse[f], *b = &y->sparse[f];
        for (int64_t i = 0; i <= x->n; i++)
            if (a->offsets[i] != b->offsets[i]) {
                CHECK(0, "%s: sparse '%s' offset %lld: %lld vs %lld", what, rec_spec_sparse(s, f)->name,
                      (long long)i, (long long)a->offsets[i], (long long)b->offsets[i]);
                return 0;
            }
        int64_t rows = rec_spec_table_rows(s, f);
        for (int64_t k = 0; k < a->offsets[x->n]; k++) {
            if (rec_jagged_id(a, k) != rec_jagged_id(b, k)) {
                CHECK(0, "%s: sparse '%s' id %lld: %lld vs %lld", what, rec_spec_sparse(s, f)->name,
                      (long long)k, (long long)rec_jagged_id(a, k), (long long)rec_jagged_id(b, k));
                return 0;
            }
            if (rec_jagged_id(a, k) < 0 || rec_jagged_id(a, k) >= rows) {
                CHECK(0, "%s: sparse '%s' id %lld = %lld outside its table of %lld rows", what,
                      rec_spec_sparse(s, f)->name, (long long)k, (long long)rec_jagged_id(a, k), (long long)rows);
                return 0;
            }
        }
    }
    return 1;
}

/* Checks a vocabulary against a brute-force count of the ids that reached its categorify
 * op: ids listed in order of decreasing count (ties by increasing id), each mapped to its
 * position + 1, and every id seen at least min_count times listed. */
static void check_vocab_order(const rec_vocab *v, const int64_t *seen, int64_t n_seen, int64_t min_count) {
    int64_t V = rec_vocab_size(v);
    const int64_t *ids = rec_vocab_ids(v);
    /* counts of each vocabulary id among `seen` */
    int64_t prev_count = INT64_MAX, prev_id = INT64_MIN, bad = 0;
    for (int64_t i = 0; i < V; i++) {
        int64_t c = 0;
        for (int64_t k = 0; k < n_seen; k++) c += seen[k] == ids[i];
        if (c < min_count || c > prev_count || (c == prev_count && ids[i] <= prev_id)) bad++;
        if (rec_vocab_lookup(v, ids[i]) != i + 1) bad++;
        prev_count = c;
        prev_id = ids[i];
    }
    /* every id seen min_count times is in the vocabulary */
    for (int64_t k = 0; k < n_seen; k++) {
        if (rec_vocab_lookup(v, seen[k]) != 0) continue;
        int64_t c = 0;
        for (int64_t j = 0; j < n_seen; j++) c += seen[j] == seen[k];
        if (c >= min_count) bad++;
    }
    CHECK(bad == 0, "vocabulary of %lld ids violates its order or threshold (%lld problems)", (long long)V,
          (long long)bad);
}

static void test_random_specs(void) {
    rec_rng r;
    rec_rng_seed(&r, 2026, 1);
    int specs_ok = 0;
    for (int t = 0; t < 60; t++) {
        int vocab = t % 3 == 2;
        char *json = random_spec(&r, vocab);
        rec_spec *spec = NULL;
        rec_status s = rec_spec_parse(&spec, json, strlen(json), "random-spec");
        CHECK(s == REC_OK, "random spec %d rejected: %s\n%s", t, rec_errmsg(), json);
        if (s) { free(json); continue; }
        int64_t n = 1 + (int64_t)rec_rng_below(&r, 1500); /* spans several 512-row blocks */
        rec_raw_block raw;
        CHECK(random_block(&raw, &r, n) == REC_OK, "raw block");
        rec_vocab_set vs = {0};
        rec_prep_plan *plan = NULL;
        rec_prep_ws *ws = NULL;
        if (vocab) {
            rec_vocab_counts *vc = NULL;
            CHECK(rec_prep_plan_init(&plan, spec, NULL) == REC_OK, "counting plan");
            CHECK(rec_prep_ws_init(&ws, plan) == REC_OK, "ws");
            CHECK(rec_vocab_counts_init(&vc, spec) == REC_OK, "counts");
            CHECK(rec_prep_count(plan, ws, &raw, 0, n, vc) == REC_OK, "count: %s", rec_errmsg());
            CHECK(rec_vocab_counts_finish(vc, spec, &vs) == REC_OK, "finish: %s", rec_errmsg());
            rec_vocab_counts_free(vc);
            rec_prep_ws_free(ws);
            rec_prep_plan_free(plan);
            CHECK(rec_spec_bind_vocabs(spec, &vs) == REC_OK, "bind: %s", rec_errmsg());
        }
        CHECK(rec_prep_plan_init(&plan, spec, vocab ? &vs : NULL) == REC_OK, "plan: %s", rec_errmsg());
        CHECK(rec_prep_ws_init(&ws, plan) == REC_OK, "ws");
        rec_batch want, got;
        rec_batch_init(&want, n, spec->n_dense, spec->n_sparse, 1);
        rec_batch_init(&got, n, spec->n_dense, spec->n_sparse, 1);
        /* Poison the fused output so unwritten values are caught. */
        memset(got.dense, 0xff, (size_t)(n * spec->n_dense) * sizeof(float));
        CHECK(rec_prep_run_ref(spec, vocab ? &vs : NULL, &raw, 0, n, &want) == REC_OK, "ref: %s", rec_errmsg());
        /* The fused run in three uneven pieces appended to one batch. */
        int64_t a = (int64_t)rec_rng_below(&r, (uint64_t)n + 1), c = a + (int64_t)rec_rng_below(&r, (uint64_t)(n - a) + 1);
        s = rec_prep_run(plan, ws, &raw, 0, a, &got);
        if (!s) s = rec_prep_run(plan, ws, &raw, a, c - a, &got);
        if (!s) s = rec_prep_run(plan, ws, &raw, c, n - c, &got);
        CHECK(s == REC_OK, "fused: %s", rec_errmsg());
        char what[64];
        snprintf(what, sizeof what, "random spec %d (%lld rows)", t, (long long)n);
        if (!s && same_batch(&got, &want, spec, what)) specs_ok++;
        else if (!s) fprintf(stderr, "%s\n", json);
        if (vocab) /* the first sparse feature categorifies into an "auto" table */
            CHECK(rec_spec_table_rows(spec, 0) == rec_vocab_size(vs.v[0]) + 1, "auto table rows = V+1");
        rec_batch_free(&want);
        rec_batch_free(&got);
        rec_prep_ws_free(ws);
        rec_prep_plan_free(plan);
        rec_vocab_set_free(&vs);
        rec_raw_block_free(&raw);
        rec_spec_free(spec);
        free(json);
    }
    CHECK(specs_ok == 60, "%d of 60 random specs matched the reference", specs_ok);
}

/* Categorify on a known column: C1 with ids given by hand, min_count 2. */
static void test_categorify(void) {
    const char *json =
        "{\"format\":\"rectrain-prep\",\"version\":1,\"name\":\"cat\",\"tables\":{\"t\":{\"rows\":\"auto\"}},"
        "\"dense\":[],\"sparse\":[{\"name\":\"c\",\"input\":\"C1\",\"ops\":[{\"op\":\"fill_null\",\"value\":0},"
        "{\"op\":\"categorify\",\"min_count\":2}],\"table\":\"t\"}]}";
    rec_spec *spec = NULL;
    rec_status s = rec_spec_parse(&spec, json, strlen(json), "cat-spec");
    CHECK(s == REC_OK, "categorify spec: %s", rec_errmsg());
    if (s) return;
    const int64_t ids[] = {9, 5, 9, 7, 5, 9, 3, 7, -1, -1, 42};
    int64_t n = (int64_t)(sizeof ids / sizeof ids[0]) + 1; /* plus one null row -> 0 */
    rec_raw_block raw;
    rec_raw_block_init(&raw, n);
    raw.n = n;
    rec_raw_list *l = &raw.cat[0];
    rec_raw_list_reserve(l, n);
    for (int64_t i = 0; i < n - 1; i++) {
        l->val[i] = ids[i];
        l->off[i + 1] = (int32_t)(i + 1);
    }
    l->null[n - 1] = 1;
    l->off[n] = (int32_t)(n - 1);
    rec_prep_plan *plan = NULL;
    rec_prep_ws *ws = NULL;
    rec_vocab_counts *vc = NULL;
    rec_vocab_set vs = {0};
    rec_batch b;
    rec_batch_init(&b, n, 0, 1, 1);
    rec_prep_plan_init(&plan, spec, NULL);
    rec_prep_ws_init(&ws, plan);
    CHECK_ERR(rec_prep_run(plan, ws, &raw, 0, n, &b), REC_EINVAL, "counting pass first");
    /* Count in two halves into two counters, merged: as the engine's threads do. */
    rec_vocab_counts *vc2 = NULL;
    rec_vocab_counts_init(&vc, spec);
    rec_vocab_counts_init(&vc2, spec);
    CHECK(rec_prep_count(plan, ws, &raw, 0, 5, vc) == REC_OK, "count 1");
    CHECK(rec_prep_count(plan, ws, &raw, 5, n - 5, vc2) == REC_OK, "count 2");
    CHECK(rec_vocab_counts_merge(vc, vc2) == REC_OK, "merge");
    CHECK(rec_vocab_counts_finish(vc, spec, &vs) == REC_OK, "finish");
    /* counts: 9x3, 5x2, 7x2, -1x2, 0x1 (the null row filled), 3x1, 42x1 -> V = 4:
     * 9 -> 1; then the ties at 2 by increasing id: -1 -> 2, 5 -> 3, 7 -> 4. */
    CHECK(vs.n == 1 && rec_vocab_size(vs.v[0]) == 4, "V = %lld", vs.n ? (long long)rec_vocab_size(vs.v[0]) : -1LL);
    const int64_t seen[] = {9, 5, 9, 7, 5, 9, 3, 7, -1, -1, 42, 0};
    check_vocab_order(vs.v[0], seen, 12, 2);
    CHECK(rec_vocab_lookup(vs.v[0], 9) == 1 && rec_vocab_lookup(vs.v[0], -1) == 2 &&
              rec_vocab_lookup(vs.v[0], 5) == 3 && rec_vocab_lookup(vs.v[0], 7) == 4 &&
              rec_vocab_lookup(vs.v[0], 3) == 0 && rec_vocab_lookup(vs.v[0], 42) == 0,
          "vocabulary order: count desc, id asc");
    CHECK(rec_spec_bind_vocabs(spec, &vs) == REC_OK, "bind");
    CHECK(rec_spec_table_rows(spec, 0) == 5, "auto table = V + 1 = %lld", (long long)rec_spec_table_rows(spec, 0));
    rec_prep_ws_free(ws);
    rec_prep_plan_free(plan);
    rec_prep_plan_init(&plan, spec, &vs);
    rec_prep_ws_init(&ws, plan);
    CHECK(rec_prep_run(plan, ws, &raw, 0, n, &b) == REC_OK, "run: %s", rec_errmsg());
    const int64_t want[] = {1, 3, 1, 4, 3, 1, 0, 4, 2, 2, 0, 0};
    int ok = b.n == n;
    for (int64_t i = 0; ok && i < n; i++) ok = rec_jagged_id(&b.sparse[0], i) == want[i] && b.sparse[0].offsets[i + 1] == i + 1;
    CHECK(ok, "categorified ids");
    rec_vocab_counts_free(vc);
    rec_vocab_counts_free(vc2);
    rec_batch_free(&b);
    rec_prep_ws_free(ws);
    rec_prep_plan_free(plan);
    rec_vocab_set_free(&vs);
    rec_raw_block_free(&raw);
    rec_spec_free(spec);
}

/* The Criteo standard plan fuses its 39 chains into 2 groups; shape errors are refused. */
static void test_plan(void) {
    const char *dir = getenv("REC_SOURCE_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/configs/criteo_standard.json", dir ? dir : ".");
    rec_spec *spec = NULL;
    rec_status s = rec_spec_load(&spec, path);
    CHECK(s == REC_OK, "load %s: %s", path, rec_errmsg());
    if (s) return;
    rec_prep_plan *plan = NULL;
    CHECK(rec_prep_plan_init(&plan, spec, NULL) == REC_OK, "plan");
    CHECK(rec_prep_plan_groups(plan) == 2, "criteo_standard fuses into %d groups, want 2", rec_prep_plan_groups(plan));
    rec_prep_ws *ws = NULL;
    rec_prep_ws_init(&ws, plan);
    rec_raw_block raw;
    rec_rng r;
    rec_rng_seed(&r, 3, 3);
    random_block(&raw, &r, 100);
    rec_batch b;
    rec_batch_init(&b, 10, spec->n_dense, spec->n_sparse + 1, 1);
    CHECK_ERR(rec_prep_run(plan, ws, &raw, 0, 10, &b), REC_EINVAL, "sparse columns");
    rec_batch_free(&b);
    rec_batch_init(&b, 10, spec->n_dense, spec->n_sparse, 1);
    CHECK_ERR(rec_prep_run(plan, ws, &raw, 0, 11, &b), REC_EINVAL, "no room");
    CHECK_ERR(rec_prep_run(plan, ws, &raw, 95, 10, &b), REC_EINVAL, "outside the raw block");
    rec_batch_free(&b);
    rec_raw_block_free(&raw);
    rec_prep_ws_free(ws);
    rec_prep_plan_free(plan);
    rec_spec_free(spec);
}

int main(void) {
    test_ref_ops();
    test_sigrid();
    test_categorify();
    test_random_specs();
    test_plan();
    return check_report();
}
