/*
 * tree.c — double binary tree schedules: AllReduce, Broadcast, Reduce.
 *
 * A ring needs 2(n-1) hops before the last rank has its result; a tree
 * needs about 2 log2(n). One binary tree wastes half the links (leaves only
 * send up and receive down), so, as docs/design.md says, two complementary trees
 * each carry half of the data, and a participant that is interior in one is
 * a leaf in the other.
 *
 * The trees span "participants": the hosts when ranks sit on several hosts
 * (args->hosts), or the ranks themselves on one host, taking positions in
 * args->order (topo.c's: NUMA node, then rank). Inside a host the ranks
 * form a chain in args->order from a head rank, where the host joins the
 * trees; tree 1 runs every chain backwards, so the two trees leave a host
 * through different ranks. These AllReduce trees are the ones
 * loomCommTree reports (topo.c asks treeNodeOf).
 *
 * One tree over m participants. Number the positions q = 1..m and lay out
 * the perfect binary tree of 2^K - 1 nodes in order (K the smallest with
 * 2^K > m): the node whose lowest set bit is b has children q - b/2 and
 * q + b/2, so the root is 2^(K-1) and every odd q is a leaf. Nodes past m
 * are removed: a removed right child is replaced by the first node <= m on
 * the path of left children below it, which keeps the in-order layout. For
 * m = 6 (positions p = q - 1):
 *
 *             q4 (p3)
 *            /       \
 *      q2 (p1)        q6 (p5)             leaves: p0 p2 p4, interior: p1 p3 p5
 *      /     \        /
 *   q1 (p0) q3 (p2) q5 (p4)
 *
 * When m is a power of two this gives the root a single child (nothing
 * lies right of q = m), so instead the perfect tree over the first m - 1
 * positions is used with the last one spliced in above the rightmost leaf.
 * Either way the depth is at most ceil(log2 m), and the interior positions
 * are exactly the odd ones. The second tree is the first with every participant moved one
 * position on (p -> p + 1 mod m), so whoever is interior in the first
 * (odd p) is a leaf in the second (even p + 1, or 0); for even m the roles
 * are exactly swapped, for odd m the participant at p = m - 1 is a leaf in
 * both. AllReduce uses the two trees over all participants.
 *
 * Broadcast and Reduce have a root. The root's participant stands above
 * both trees, which are built over the other m - 1 participants (the one
 * after the root's first); its child in each tree is that tree's root. So it
 * sends (or receives) half of the data to (from) each, and the depth grows
 * by one. Inside the root's host the chain starts at the root.
 *
 * Pipelining. The lane's range is split in two halves, one per tree, and
 * each half in pieces of at most chunkElems. (With args->trees == 1 the
 * whole range takes the first tree: when ranks outnumber cores, a tiny
 * message pays for every rank woken, and one tree wakes half as many for
 * the same depth; the tuner decides.) With R the depth of a tree and
 * d the depth of this rank in it, piece j is given a time:
 *
 *   AllReduce   reduce-up   j + R - d     broadcast-down  j + R + d
 *               (the root does both at j + R: folds its children, sends down)
 *   Reduce      reduce-up   j + R - d
 *   Broadcast   down        j + d
 *
 * so every message is received exactly one time unit after it is sent, and a
 * rank's steps are emitted in the order (time, tree, up before down). That
 * is a synchronous schedule in which no FIFO ever holds more than two
 * messages per tree, so with LOOM_STEPS slots it cannot deadlock; both ends
 * of a FIFO order its messages by the same key, so they match in order; and
 * while a piece travels down, the pieces behind it are already on their
 * way up (reduce-up and broadcast-down overlap). The symbolic simulator in
 * tests/unit/check_schedule.c runs every schedule here for n = 1..128.
 *
 * Steps of one piece on a rank with children c1..ck (k <= 3: two trees'
 * children plus the next rank of its chain), each one step with fan-in or
 * fan-out (schedule.h), so a piece is read and written once per rank
 * whatever k is:
 *
 *   up      RECV_REDUCE_SEND from c1..ck (+) sendbuff to the parent (a leaf: SEND)
 *   top     RECV_REDUCE_COPY FINAL from c1..ck into recvbuff; for AllReduce
 *           RECV_REDUCE_COPY_SEND FINAL, which also starts the way down to c1..ck
 *   down    RECV_COPY_SEND from the parent to recvbuff and c1..ck (a leaf: RECV)
 *
 * No rank keeps a partial sum between steps, so a non-root rank of a Reduce
 * writes nothing of its own (its recvbuff is never touched).
 */
#include <stdint.h>
#include <stdlib.h>

#include "schedule.h"

/* ---- one binary tree over positions 0..m-1 ---- */

/* The root position of the in-order tree over m >= 1 positions. */
static int inorderTop(int m)
{
    int top = 1;
    while (top <= m / 2)
        top *= 2;
    return top - 1;
}

/* The parent position of p in the in-order tree over m positions, or -1 for the root. */
static int inorderUp(int m, int p)
{
    int q = p + 1, b = q & -q;
    if (p == inorderTop(m))
        return -1;
    do {
        q = (q & 2 * b) ? q - b : q + b; /* a right child's parent is below it */
        b *= 2;
    } while (q > m);
    return q - 1;
}

/* The child positions of p in the in-order tree over m positions; returns how many (0..2). */
static int inorderDown(int m, int p, int down[2])
{
    int q = p + 1, b = q & -q, k = 0;
    if (b == 1)
        return 0;
    down[k++] = q - b / 2 - 1;
    for (int c = b / 2; c >= 1; c /= 2) {
        if (q + c <= m) {
            down[k++] = q + c - 1;
            break;
        }
    }
    return k;
}

/*
 * The in-order tree gives its root a single child when m is a power of two
 * (the root q = m has nothing to its right), which costs every path a hop.
 * So for m = 2^k >= 4 the tree is the perfect one over the first m - 1
 * positions, with the last position spliced in above the rightmost leaf:
 * m - 1 takes the place of m - 2, which becomes its (left) child. In-order
 * and parity are kept: interior positions are still the odd ones.
 */
static int binarySpliced(int m)
{
    return m >= 4 && (m & (m - 1)) == 0;
}

static int binaryTop(int m)
{
    return inorderTop(binarySpliced(m) ? m - 1 : m);
}

static int binaryUp(int m, int p)
{
    if (!binarySpliced(m))
        return inorderUp(m, p);
    if (p == m - 2)
        return m - 1;
    return inorderUp(m - 1, p == m - 1 ? m - 2 : p);
}

/* The child positions of p into down[]; returns how many (0..2). */
static int binaryDown(int m, int p, int down[2])
{
    if (!binarySpliced(m))
        return inorderDown(m, p, down);
    if (p == m - 1) {
        down[0] = m - 2;
        return 1;
    }
    int k = inorderDown(m - 1, p, down);
    for (int i = 0; i < k; i++)
        if (down[i] == m - 2)
            down[i] = m - 1;
    return k;
}

/* ---- participants, chains and the rank-level trees ---- */

struct treeLayout {
    int n;      /* ranks */
    int m;      /* participants */
    int super;  /* participant above both trees (rooted collectives), else -1 */
    int *part;  /* [n] participant of each rank */
    int *chain; /* [n] ranks by participant, each participant's chain from its head */
    int *start; /* [m + 1] where each participant's chain begins in chain[] */
    int *where; /* [n] index of each rank in chain[] */
    int *depth; /* [n] scratch for layoutHeight */
};

static int treeRooted(loomColl_t coll)
{
    return coll == LOOM_COLL_BROADCAST || coll == LOOM_COLL_REDUCE;
}

/* The rank at index i of a->order (rank order without one). */
static int orderAt(const struct loomSchedArgs *a, int i)
{
    return a->order ? a->order[i] : i;
}

/*
 * Participants are hosts when a->hosts names more than one, else ranks,
 * which take positions in a->order. -1 when hosts or order are malformed.
 */
static int layoutParticipants(const struct loomSchedArgs *a, struct treeLayout *L)
{
    int n = a->nranks, m = 1;
    for (int r = 0; r < n; r++)
        L->depth[r] = -1; /* scratch: where each rank stands in a->order */
    for (int i = 0; i < n; i++) {
        int r = orderAt(a, i);
        if (r < 0 || r >= n || L->depth[r] >= 0)
            return -1;
        L->depth[r] = i;
    }
    for (int r = 0; r < n; r++) {
        int h = a->hosts ? a->hosts[r] : L->depth[r];
        if (h < 0 || h >= n)
            return -1;
        L->part[r] = h;
        m = h + 1 > m ? h + 1 : m;
    }
    if (a->hosts && m == 1)
        for (int r = 0; r < n; r++)
            L->part[r] = L->depth[r], m = n;
    L->m = m;
    for (int P = 0; P <= m; P++)
        L->start[P] = 0;
    for (int r = 0; r < n; r++)
        L->start[L->part[r] + 1]++;
    for (int P = 0; P < m; P++) {
        if (L->start[P + 1] == 0)
            return -1; /* a host index nobody has */
        L->start[P + 1] += L->start[P];
    }
    return 0;
}

/* Chains in a->order, except that the root heads its own. */
static void layoutChains(const struct loomSchedArgs *a, struct treeLayout *L)
{
    int *fill = L->where; /* next free index of each participant, reused below */
    for (int P = 0; P < L->m; P++)
        fill[P] = L->start[P];
    for (int i = 0; i < L->n; i++)
        L->chain[fill[L->part[orderAt(a, i)]]++] = orderAt(a, i);
    if (L->super >= 0) {
        int s = L->start[L->super], e = L->start[L->super + 1];
        while (L->chain[s] != a->root) { /* rotate the root's chain to start at the root */
            int first = L->chain[s];
            for (int i = s; i + 1 < e; i++)
                L->chain[i] = L->chain[i + 1];
            L->chain[e - 1] = first;
        }
    }
    for (int i = 0; i < L->n; i++)
        L->where[L->chain[i]] = i;
}

static void layoutFree(struct treeLayout *L)
{
    free(L->part);
    L->part = NULL;
}

static loomResult_t layoutBuild(const struct loomSchedArgs *a, struct treeLayout *L)
{
    int n = a->nranks;
    if (n < 1 || a->rank < 0 || a->rank >= n || a->chunkElems == 0)
        return loomInternalError;
    if (treeRooted(a->coll) && (a->root < 0 || a->root >= n))
        return loomInternalError;
    L->n = n;
    L->part = malloc((5 * (size_t)n + 1) * sizeof(int));
    if (L->part == NULL)
        return loomSystemError;
    L->chain = L->part + n;
    L->where = L->chain + n;
    L->depth = L->where + n;
    L->start = L->depth + n;
    if (layoutParticipants(a, L) != 0) {
        layoutFree(L);
        return loomInternalError;
    }
    L->super = treeRooted(a->coll) ? L->part[a->root] : -1;
    layoutChains(a, L);
    return loomSuccess;
}

/* Positions in tree t count m' participants: all, or all but the one above the trees. */
static int layoutSpan(const struct treeLayout *L)
{
    return L->super < 0 ? L->m : L->m - 1;
}

/* Position of participant P in tree t; -1 for the participant above the trees. */
static int partPos(const struct treeLayout *L, int t, int P)
{
    if (L->super < 0)
        return (P + t) % L->m;
    if (P == L->super)
        return -1;
    int i = (P - L->super - 1 + L->m) % L->m;
    return (i + t) % layoutSpan(L);
}

static int posPart(const struct treeLayout *L, int t, int pos)
{
    int span = layoutSpan(L);
    int i = (pos - t % span + span) % span;
    return L->super < 0 ? i : (L->super + 1 + i) % L->m;
}

static int partUp(const struct treeLayout *L, int t, int P)
{
    int pos = partPos(L, t, P);
    if (pos < 0)
        return -1;
    int up = binaryUp(layoutSpan(L), pos);
    return up >= 0 ? posPart(L, t, up) : L->super;
}

static int partDown(const struct treeLayout *L, int t, int P, int down[2])
{
    int pos = partPos(L, t, P), span = layoutSpan(L);
    if (pos < 0) {
        if (span == 0)
            return 0;
        down[0] = posPart(L, t, binaryTop(span));
        return 1;
    }
    int k = binaryDown(span, pos, down);
    for (int i = 0; i < k; i++)
        down[i] = posPart(L, t, down[i]);
    return k;
}

/*
 * Chains in tree t: tree 1 runs each participant's chain backwards, so the
 * two trees join a host's traffic to the others through different ranks
 * (the root's own host excepted: its chain starts at the root in both).
 */
static int chainReversed(const struct treeLayout *L, int t, int P)
{
    return t == 1 && P != L->super;
}

/* The rank at index i of participant P's chain in tree t. */
static int chainAt(const struct treeLayout *L, int t, int P, int i)
{
    return chainReversed(L, t, P) ? L->chain[L->start[P + 1] - 1 - i] : L->chain[L->start[P] + i];
}

/* Index of rank r in its participant's chain in tree t. */
static int chainIndex(const struct treeLayout *L, int t, int r)
{
    int P = L->part[r], i = L->where[r] - L->start[P];
    return chainReversed(L, t, P) ? L->start[P + 1] - L->start[P] - 1 - i : i;
}

static int rankUp(const struct treeLayout *L, int t, int r)
{
    int i = chainIndex(L, t, r), P = L->part[r];
    if (i > 0)
        return chainAt(L, t, P, i - 1);
    int Q = partUp(L, t, P);
    return Q < 0 ? -1 : chainAt(L, t, Q, 0);
}

/* Children of rank r: the next rank of its chain, then (a head) the heads of child participants. */
static int rankDown(const struct treeLayout *L, int t, int r, int down[LOOM_TREE_MAXDOWN])
{
    int i = chainIndex(L, t, r), P = L->part[r], k = 0, parts[2];
    if (L->start[P] + i + 1 < L->start[P + 1])
        down[k++] = chainAt(L, t, P, i + 1);
    if (i == 0) {
        int c = partDown(L, t, P, parts);
        for (int j = 0; j < c; j++)
            down[k++] = chainAt(L, t, parts[j], 0);
    }
    return k;
}

static int rankDepth(const struct treeLayout *L, int t, int r)
{
    int d = 0;
    for (int u = rankUp(L, t, r); u >= 0; u = rankUp(L, t, u))
        d++;
    return d;
}

/*
 * Depth of the deepest rank of tree t. With one rank per participant it is
 * the binary tree's, floor(log2 m') (position 0 hangs at the end of the
 * path of left children from the root), one more under a rooted top.
 * Otherwise each rank's depth is found once, reusing its parent's.
 */
static int layoutHeight(const struct treeLayout *L, int t)
{
    int height = 0;
    if (L->m == L->n) {
        for (int span = layoutSpan(L); span > 1; span /= 2)
            height++;
        return height + (L->super >= 0 && L->n > 1);
    }
    for (int r = 0; r < L->n; r++)
        L->depth[r] = -1;
    for (int r = 0; r < L->n; r++) {
        int k = 0, u = r;
        for (; u >= 0 && L->depth[u] < 0; u = rankUp(L, t, u))
            k++;
        int base = u < 0 ? -1 : L->depth[u];
        for (u = r; k > 0; k--, u = rankUp(L, t, u))
            L->depth[u] = base + k;
        height = L->depth[r] > height ? L->depth[r] : height;
    }
    return height;
}

static void layoutNode(const struct treeLayout *L, int t, int r, struct loomTreeNode *nd)
{
    nd->up = rankUp(L, t, r);
    nd->ndown = rankDown(L, t, r, nd->down);
    for (int i = nd->ndown; i < LOOM_TREE_MAXDOWN; i++)
        nd->down[i] = -1;
    nd->depth = rankDepth(L, t, r);
}

loomResult_t treeNodeOf(const struct loomSchedArgs *a, int tree, struct loomTreeNode *out)
{
    struct treeLayout L;
    if (tree < 0 || tree > 1)
        return loomInternalError;
    loomResult_t res = layoutBuild(a, &L);
    if (res != loomSuccess)
        return res;
    layoutNode(&L, tree, a->rank, out);
    layoutFree(&L);
    return loomSuccess;
}

/* ---- steps ---- */

/* This rank in both trees of one lane. */
struct treeLane {
    const struct loomSchedArgs *a;
    struct loomPlan *out;
    struct loomTreeNode node[2];
    int height[2];  /* depth of the deepest rank of each tree */
    size_t base[2]; /* each tree's part of [lo, hi) */
    size_t len[2];
    size_t pieces[2];
};

/* The templates of one (tree, phase) being appended: every piece of tree t, lag `lag`. */
struct treeBody {
    const struct treeLane *l;
    int t;
    uint32_t lag;
};

/*
 * One template over the pieces of the body's tree: op receiving from the
 * nrecv ranks of recv[] and sending to the nsend of send[] (fan-in and
 * fan-out, schedule.h), reading srcBuf and writing recvbuff at the piece's
 * own offset where the op uses them.
 */
static loomResult_t treeStep(const struct treeBody *b, loomStepOp_t op, uint8_t flags, int nrecv,
                             const int *recv, int nsend, const int *send, uint8_t srcBuf)
{
    unsigned uses = loomStepUses(op);
    size_t base = b->l->base[b->t];
    struct loomPlanStep t = {
        .op = (uint8_t)op,
        .srcBuf = srcBuf,
        .dstBuf = LOOM_BUF_RECV,
        .flags = flags,
        .moves = (uint8_t)(((uses & LOOM_USES_SRC) ? LOOM_PLAN_SRC_MOVES : 0) |
                           ((uses & LOOM_USES_DST) ? LOOM_PLAN_DST_MOVES : 0)),
        .nrecv = (uint8_t)nrecv,
        .nsend = (uint8_t)nsend,
        .nblocks = 1,
        .lag = b->lag,
        .len = b->l->len[b->t],
        .piece = b->l->a->chunkElems,
        .srcBase = (uses & LOOM_USES_SRC) ? base : 0,
        .dstBase = (uses & LOOM_USES_DST) ? base : 0,
    };
    for (int k = 0; k < nrecv; k++)
        t.recvPeers[k] = recv[k];
    for (int k = 0; k < nsend; k++)
        t.sendPeers[k] = send[k];
    return planAppend(b->l->out, &t);
}

/*
 * Reduce-up of one piece: one step folds every child's message into this
 * rank's input and passes the sum up; at the top it finishes the sum into
 * recvbuff (and for AllReduce sends it to every child, which starts the way
 * down).
 */
static loomResult_t treeUp(const struct treeBody *b, const struct loomTreeNode *nd, int sendDown)
{
    const uint8_t src = LOOM_BUF_SEND;
    if (nd->ndown == 0) {
        if (nd->up < 0) /* alone in the tree */
            return treeStep(b, LOOM_STEP_COPY, LOOM_STEP_FINAL, 0, NULL, 0, NULL, src);
        return treeStep(b, LOOM_STEP_SEND, 0, 0, NULL, 1, &nd->up, src);
    }
    if (nd->up >= 0)
        return treeStep(b, LOOM_STEP_RECV_REDUCE_SEND, 0, nd->ndown, nd->down, 1, &nd->up, src);
    if (!sendDown)
        return treeStep(b, LOOM_STEP_RECV_REDUCE_COPY, LOOM_STEP_FINAL, nd->ndown, nd->down, 0,
                        NULL, src);
    return treeStep(b, LOOM_STEP_RECV_REDUCE_COPY_SEND, LOOM_STEP_FINAL, nd->ndown, nd->down,
                    nd->ndown, nd->down, src);
}

/* Broadcast-down of one piece to every child at once; the top (a Broadcast root) sends from
 * sendbuff. */
static loomResult_t treeDown(const struct treeBody *b, const struct loomTreeNode *nd)
{
    if (nd->up < 0) {
        loomResult_t res = treeStep(b, LOOM_STEP_COPY, 0, 0, NULL, 0, NULL, LOOM_BUF_SEND);
        if (res == loomSuccess && nd->ndown > 0)
            res = treeStep(b, LOOM_STEP_SEND, 0, 0, NULL, nd->ndown, nd->down, LOOM_BUF_SEND);
        return res;
    }
    if (nd->ndown == 0)
        return treeStep(b, LOOM_STEP_RECV, 0, 1, &nd->up, 0, NULL, LOOM_BUF_SEND);
    return treeStep(b, LOOM_STEP_RECV_COPY_SEND, 0, 1, &nd->up, nd->ndown, nd->down, LOOM_BUF_SEND);
}

enum { TREE_UP = 0, TREE_DOWN = 1 };

/* When piece 0 of tree t goes through `phase` on this rank; -1 if the phase is not run here. */
static long treeStart(const struct treeLane *l, int t, int phase)
{
    const struct loomTreeNode *nd = &l->node[t];
    long R = l->height[t], d = nd->depth;
    switch (l->a->coll) {
    case LOOM_COLL_ALLREDUCE:
        if (d == 0) /* the top does both at once */
            return phase == TREE_UP ? R : -1;
        return phase == TREE_UP ? R - d : R + d;
    case LOOM_COLL_REDUCE:
        return phase == TREE_UP ? R - d : -1;
    default:
        return phase == TREE_DOWN ? d : -1;
    }
}

/*
 * One loop over time units T: in each, for tree 0 then tree 1, reduce-up
 * then broadcast-down of the piece whose time it is (the templates' lags
 * are the start times above), so steps come in (time, tree, phase) order.
 */
static loomResult_t treeEmit(const struct treeLane *l)
{
    planLoop(l->out);
    for (int t = 0; t < 2; t++) {
        for (int ph = 0; ph < 2; ph++) {
            long start = l->pieces[t] ? treeStart(l, t, ph) : -1;
            if (start < 0)
                continue;
            struct treeBody b = {l, t, (uint32_t)start};
            loomResult_t res = ph == TREE_DOWN
                                   ? treeDown(&b, &l->node[t])
                                   : treeUp(&b, &l->node[t], l->a->coll == LOOM_COLL_ALLREDUCE);
            if (res != loomSuccess)
                return res;
        }
    }
    return loomSuccess;
}

static loomResult_t treeSchedule(const struct loomSchedArgs *a, struct loomPlan *out)
{
    struct treeLayout L;
    struct treeLane l = {.a = a, .out = out};
    loomResult_t res = layoutBuild(a, &L);
    if (res != loomSuccess)
        return res;
    if (a->lo > a->hi || a->hi > a->count) {
        layoutFree(&L);
        return loomInternalError;
    }
    size_t len = a->hi - a->lo;
    l.len[1] = a->trees == 1 ? 0 : len / 2;
    l.len[0] = len - l.len[1];
    l.base[0] = a->lo, l.base[1] = a->lo + l.len[0];
    for (int t = 0; t < 2; t++) {
        layoutNode(&L, t, a->rank, &l.node[t]);
        l.height[t] = layoutHeight(&L, t);
        l.pieces[t] = l.len[t] / a->chunkElems + (l.len[t] % a->chunkElems != 0);
    }
    layoutFree(&L);
    return treeEmit(&l);
}

/* The generators ignore a->coll, as the ring's do: each knows its collective. */
static loomResult_t treeScheduleAs(const struct loomSchedArgs *a, loomColl_t coll,
                                   struct loomPlan *out)
{
    struct loomSchedArgs b = *a;
    b.coll = coll;
    return treeSchedule(&b, out);
}

loomResult_t treeAllReducePlan(const struct loomSchedArgs *a, struct loomPlan *out)
{
    return treeScheduleAs(a, LOOM_COLL_ALLREDUCE, out);
}

loomResult_t treeBroadcastPlan(const struct loomSchedArgs *a, struct loomPlan *out)
{
    return treeScheduleAs(a, LOOM_COLL_BROADCAST, out);
}

loomResult_t treeReducePlan(const struct loomSchedArgs *a, struct loomPlan *out)
{
    return treeScheduleAs(a, LOOM_COLL_REDUCE, out);
}
