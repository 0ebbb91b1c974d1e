<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Unit\Db;

use OCA\Istota\Tests\Support\FakeSidecar;
use OCA\Istota\Tests\Support\Harness;
use PHPUnit\Framework\TestCase;

class OutboxMapperTest extends TestCase {
	private Harness $h;

	protected function setUp(): void {
		$this->h = new Harness(FakeSidecar::deadUrl());
	}

	protected function tearDown(): void {
		$this->h->close();
	}

	public function testEmptyOutbox(): void {
		$this->assertFalse($this->h->outbox->hasPending());
		$this->assertSame(0, $this->h->outbox->count());
		$this->assertSame([], $this->h->outbox->head(10));
	}

	public function testEnqueueKeepsOrderAndFields(): void {
		$first = $this->h->outbox->enqueue('{"n":1}', 'tok1', '10', 1000);
		$second = $this->h->outbox->enqueue('{"n":2}', 'tok1', '11', 1001, 1, 'HTTP 503', 1010);
		$third = $this->h->outbox->enqueue('{"n":3}', 'tok2', '', 1002);

		$this->assertTrue($first < $second && $second < $third);
		$this->assertTrue($this->h->outbox->hasPending());
		$this->assertSame(3, $this->h->outbox->count());

		$head = $this->h->outbox->head(2);
		$this->assertCount(2, $head);
		$this->assertSame([$first, $second], [$head[0]->id, $head[1]->id]);
		$this->assertSame('{"n":1}', $head[0]->body);
		$this->assertSame('tok1', $head[0]->conversationToken);
		$this->assertSame('10', $head[0]->messageId);
		$this->assertSame(1000, $head[0]->createdAt);
		$this->assertSame(0, $head[0]->attempts);
		$this->assertSame('', $head[0]->lastError);
		$this->assertSame(1000, $head[0]->nextAttemptAt);
		$this->assertSame(1, $head[1]->attempts);
		$this->assertSame('HTTP 503', $head[1]->lastError);
		$this->assertSame(1010, $head[1]->nextAttemptAt);

		$rows = $this->h->db->rows('istota_outbox');
		$this->assertNull($rows[2]['message_id'], 'empty strings are stored as NULL');
	}

	public function testMarkFailedAndDelete(): void {
		$id = $this->h->outbox->enqueue('{}', 't', '1', 1000);
		$other = $this->h->outbox->enqueue('{}', 't', '2', 1000);
		$this->h->outbox->markFailed($id, 3, str_repeat('x', 5000), 2000);

		$entry = $this->h->outbox->head(1)[0];
		$this->assertSame(3, $entry->attempts);
		$this->assertSame(1000, strlen($entry->lastError), 'last_error is cut to the column size');
		$this->assertSame(2000, $entry->nextAttemptAt);

		$this->h->outbox->delete($id);
		$this->assertSame([$other], array_map(static fn ($e) => $e->id, $this->h->outbox->head(10)));
	}

	public function testLargeUnicodeBodySurvives(): void {
		$body = json_encode(['text' => str_repeat('Grüße 🍰 ', 20000)], JSON_UNESCAPED_UNICODE);
		$this->h->outbox->enqueue($body, 't', '1', 1);
		$this->assertSame($body, $this->h->outbox->head(1)[0]->body);
	}
}
