/* Tests for lib/core/sha256 (nettle underneath): the FIPS 180-2 appendix B
 * test vectors (one block, two blocks, a million 'a's, whole and fed 1000
 * at a time to nettle's streaming calls), the padding boundaries (55, 56,
 * 63, 64 ... bytes, checked against Python's hashlib), and that feeding the
 * message in pieces gives the digest of feeding it whole. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "sha256.h"
#include "util.h"

static void hex_of(struct sha256_ctx *c, char hex[SHA256_HEX_SIZE]) {
        uint8_t d[SHA256_DIGEST_SIZE];
        sha256_digest(c, sizeof d, d);
        for (size_t i = 0; i < SHA256_DIGEST_SIZE; i++)
                snprintf(hex + 2 * i, 3, "%02x", d[i]);
}

/* FIPS 180-2, appendix B.1: "abc". */
static void test_fips_one_block(void **state) {
        (void) state;
        char hex[SHA256_HEX_SIZE];
        assert_string_equal(sha256_hex("abc", 3, hex),
                            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

/* Appendix B.2: the 448-bit message that takes two blocks. */
static void test_fips_two_blocks(void **state) {
        (void) state;
        static const char m[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
        char hex[SHA256_HEX_SIZE];
        assert_string_equal(sha256_hex(m, strlen(m), hex),
                            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

/* Appendix B.3: one million 'a's, whole and fed 1000 at a time. */
static void test_fips_million_a(void **state) {
        (void) state;
        static const char want[] = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
        _cleanup_free_ char *whole = xmalloc(1000000);
        char buf[1000], hex[SHA256_HEX_SIZE];
        memset(whole, 'a', 1000000);
        assert_string_equal(sha256_hex(whole, 1000000, hex), want);
        struct sha256_ctx c;
        memset(buf, 'a', sizeof(buf));
        sha256_init(&c);
        for (int i = 0; i < 1000; i++)
                sha256_update(&c, sizeof(buf), (const uint8_t *) buf);
        hex_of(&c, hex);
        assert_string_equal(hex, want);
}

static void test_empty(void **state) {
        (void) state;
        char hex[SHA256_HEX_SIZE];
        assert_string_equal(sha256_hex("", 0, hex),
                            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

/* The lengths where the padding and the length field do or do not fit in
 * the last block. */
static void test_padding_boundaries(void **state) {
        (void) state;
        static const struct {
                size_t n;
                const char *hex;
        } v[] = {
                { 55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318" },
                { 56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a" },
                { 63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34" },
                { 64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb" },
                { 65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0" },
                { 119, "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb" },
                { 120, "2f3d335432c70b580af0e8e1b3674a7c020d683aa5f73aaaedfdc55af904c21c" },
        };
        char buf[128], hex[SHA256_HEX_SIZE];
        memset(buf, 'a', sizeof(buf));
        for (size_t i = 0; i < ELEMENTSOF(v); i++)
                assert_string_equal(sha256_hex(buf, v[i].n, hex), v[i].hex);
}

/* Any split of a message into two updates gives the same digest. */
static void test_split_updates(void **state) {
        (void) state;
        static const char m[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
        size_t n = strlen(m);
        for (size_t k = 0; k <= n; k++) {
                struct sha256_ctx c;
                char hex[SHA256_HEX_SIZE];
                sha256_init(&c);
                sha256_update(&c, k, (const uint8_t *) m);
                sha256_update(&c, n - k, (const uint8_t *) m + k);
                hex_of(&c, hex);
                assert_string_equal(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
        }
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_fips_one_block),
                cmocka_unit_test(test_fips_two_blocks),
                cmocka_unit_test(test_fips_million_a),
                cmocka_unit_test(test_empty),
                cmocka_unit_test(test_padding_boundaries),
                cmocka_unit_test(test_split_updates),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
