<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Unit\BackgroundJob;

use OCA\Istota\AppInfo\Application;
use OCA\Istota\BackgroundJob\FlushOutbox;
use OCA\Istota\Listener\BotInvokeListener;
use OCA\Istota\Service\AppSettings;
use OCA\Istota\Tests\Support\FakeSidecar;
use OCA\Istota\Tests\Support\Harness;
use OCA\Istota\Tests\Support\HarnessTestCase;
use OCA\Talk\Events\BotInvokeEvent;
use OCP\BackgroundJob\IJob;

/**
 * The outbox job against the fake sidecar: strict id order, stop at the first failure,
 * nothing lost, nothing accepted twice.
 */
class FlushOutboxTest extends HarnessTestCase {
	protected function setUp(): void {
		parent::setUp();
		$this->h->directory->addUser('alice', 'Alice');
	}

	private function job(): FlushOutbox {
		return new FlushOutbox($this->h->clock, $this->h->flusher);
	}

	private function runJob(): void {
		$run = new \ReflectionMethod(FlushOutbox::class, 'run');
		$run->setAccessible(true);
		$run->invoke($this->job(), null);
	}

	private static function message(string $token, string $id, string $text = 'hello'): array {
		return [
			'type' => 'Create',
			'actor' => ['type' => 'Person', 'id' => 'users/alice', 'name' => 'Alice', 'talkParticipantType' => '3'],
			'object' => ['type' => 'Note', 'id' => $id, 'name' => 'message', 'content' => json_encode(['message' => $text, 'parameters' => []]), 'mediaType' => 'text/markdown'],
			'target' => ['type' => 'Collection', 'id' => $token, 'name' => 'Room'],
		];
	}

	/** Queues events the way the listener does, built at $at. @return list<int> ids */
	private function queue(array $ids, int $at, string $token = 'room1'): array {
		$rows = [];
		foreach ($ids as $id) {
			$body = $this->h->payloads->encode($this->h->payloads->build('nextcloudapp://istota', self::message($token, $id)));
			$rows[] = $this->h->outbox->enqueue($body, $token, $id, $at);
		}
		return $rows;
	}

	private function talkRequests(): array {
		return array_values(array_filter(self::$sidecar->requests(), static fn (array $r): bool => $r['uri'] === '/v1/talk/events'));
	}

	public function testJobSchedule(): void {
		$job = $this->job();
		$this->assertSame(60, $job->getInterval());
		$this->assertTrue($job->isTimeSensitive());
		$this->assertFalse($job->getAllowParallelRuns());
		$this->assertInstanceOf(IJob::class, $job);
	}

	public function testDeliversInIdOrderSignedAtSendTime(): void {
		// Queued an hour ago: signed then, the sidecar would call them stale.
		$this->queue(['1', '2', '3', '4', '5'], time() - 3600);
		$this->runJob();

		$this->assertSame(['room1/1', 'room1/2', 'room1/3', 'room1/4', 'room1/5'], self::$sidecar->eventKeys());
		$this->assertSame(0, $this->h->outbox->count());
		$this->assertSame([], self::$sidecar->duplicates());
	}

	public function testManyRowsAcrossBatches(): void {
		$ids = array_map('strval', range(1, 45));
		$this->queue($ids, time());
		$this->runJob();
		$this->assertSame(array_map(static fn (string $id): string => 'room1/' . $id, $ids), self::$sidecar->eventKeys());
		$this->assertSame(0, $this->h->outbox->count());
	}

	public function testStopsAtTheFirstFailureAndRecordsIt(): void {
		[$first, $second, $third] = $this->queue(['1', '2', '3'], time());
		self::$sidecar->control(['talk_status' => 503]);
		$this->runJob();

		$this->assertCount(1, $this->talkRequests(), 'one failed attempt, then stop');
		$rows = $this->h->outbox->head(10);
		$this->assertSame([$first, $second, $third], array_map(static fn ($r) => $r->id, $rows));
		$this->assertSame([1, 0, 0], array_map(static fn ($r) => $r->attempts, $rows));
		$this->assertStringContainsString('HTTP 503', $rows[0]->lastError);

		$this->runJob();
		$this->assertSame(2, $this->h->outbox->head(1)[0]->attempts, 'the job retries without waiting for the backoff');
	}

	public function testASidecarThatComesBackDrainsEverythingOnce(): void {
		$dead = new Harness(FakeSidecar::deadUrl(), self::SECRET);
		$dead->directory->addUser('alice', 'Alice');
		try {
			// Events arrive while the sidecar is down: the listener queues them all.
			foreach (['1', '2', '3', '4'] as $id) {
				(new BotInvokeListener($dead->forwarder))->handle(new BotInvokeEvent('nextcloudapp://istota', self::message('room1', $id)));
			}
			$this->assertSame(4, $dead->outbox->count());
			$flush = new \ReflectionMethod(FlushOutbox::class, 'run');
			$flush->invoke(new FlushOutbox($dead->clock, $dead->flusher), null);
			$this->assertSame(4, $dead->outbox->count(), 'nothing is lost while the sidecar is down');

			// The sidecar is back (same database, now the right URL).
			$dead->appConfig->setValueString(Application::APP_ID, AppSettings::KEY_SIDECAR_URL, self::$sidecar->url);
			$flush->invoke(new FlushOutbox($dead->clock, $dead->flusher), null);

			$this->assertSame(0, $dead->outbox->count());
			$this->assertSame(['room1/1', 'room1/2', 'room1/3', 'room1/4'], self::$sidecar->eventKeys());
			$this->assertSame([], self::$sidecar->duplicates());
		} finally {
			$dead->close();
		}
	}

	public function testACrashBetweenSendAndDeleteOnlyCausesARecognisedRedelivery(): void {
		[$first] = $this->queue(['1', '2'], time());
		// Delivered, but the process died before deleting the row.
		$this->h->client->postTalkEvent($this->h->outbox->head(1)[0]->body, 5.0, 2.0);
		$this->runJob();

		$this->assertSame(['room1/1', 'room1/2'], self::$sidecar->eventKeys(), 'accepted once each');
		$this->assertSame([['token' => 'room1', 'message_id' => '1']], self::$sidecar->duplicates());
		$this->assertSame(0, $this->h->outbox->count());
	}

	public function testASlowSidecarThatStillAcceptedIsNotAskedToRunItTwice(): void {
		$this->h->appConfig->setValueString(Application::APP_ID, AppSettings::KEY_FORWARD_TIMEOUT_MS, '100');
		self::$sidecar->control(['event_delay_ms' => 1000, 'addressed' => true]);
		$event = new BotInvokeEvent('nextcloudapp://istota', self::message('room1', '77', '!help'));
		(new BotInvokeListener($this->h->forwarder))->handle($event);

		$this->assertSame(1, $this->h->outbox->count(), 'timed out in the listener: queued');
		$this->assertSame(['👀'], $event->getReactions(), 'the local rule: "!" addresses the bot');

		self::$sidecar->control(['addressed' => true]);
		$this->runJob();
		$this->assertSame(0, $this->h->outbox->count());
		$this->assertSame(['room1/77'], self::$sidecar->eventKeys());
		$this->assertSame([['token' => 'room1', 'message_id' => '77']], self::$sidecar->duplicates());
	}

	public function testARowTheSidecarRefusesForGoodDoesNotBlockTheRest(): void {
		$this->queue(['1'], time());
		$this->h->outbox->enqueue('{"this is":"not an event"}', 'room1', '2', time());
		$this->queue(['3'], time());
		$this->runJob();

		$this->assertSame(['room1/1', 'room1/3'], self::$sidecar->eventKeys());
		$this->assertSame(0, $this->h->outbox->count());
		$this->assertCount(1, $this->h->logger->messages('error'));
	}

	public function testNotConfiguredKeepsEverything(): void {
		$this->queue(['1', '2'], time());
		$this->h->appConfig->deleteKey(Application::APP_ID, AppSettings::KEY_SHARED_SECRET);
		$this->runJob();
		$this->assertSame(2, $this->h->outbox->count());
		$this->assertSame([], self::$sidecar->requests());
		$this->assertStringContainsString('istota:setup', $this->h->outbox->head(1)[0]->lastError);
	}

	public function testTheListenerRespectsTheBackoffButTheJobDoesNot(): void {
		$now = time();
		$this->queue(['1'], $now);
		$this->h->outbox->markFailed($this->h->outbox->head(1)[0]->id, 1, 'HTTP 503', $now + 600);

		(new BotInvokeListener($this->h->forwarder))->handle(new BotInvokeEvent('nextcloudapp://istota', self::message('room1', '2')));
		$this->assertSame([], self::$sidecar->requests());
		$this->assertSame(2, $this->h->outbox->count());

		$this->runJob();
		$this->assertSame(['room1/1', 'room1/2'], self::$sidecar->eventKeys());
	}
}
