<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Unit\Listener;

use OCA\Istota\AppInfo\Application;
use OCA\Istota\Listener\BotInvokeListener;
use OCA\Istota\Service\AppSettings;
use OCA\Istota\Service\AttachmentImporter;
use OCA\Istota\Tests\Support\FakeSidecar;
use OCA\Istota\Tests\Support\Harness;
use OCA\Istota\Tests\Support\HarnessTestCase;
use OCA\Talk\Events\BotInvokeEvent;
use OCA\Talk\Room;
use OCP\Files\NotPermittedException;

/**
 * Files shared in Talk, end to end: a file-share Activity in, the file copied from the
 * sharer's files into the bot's storage (a real directory), and the signed body the
 * (fake) sidecar receives saying where it landed or why it did not.
 */
class AttachmentsTest extends HarnessTestCase {
	private const ROOMS = ['notetok' => [Room::TYPE_NOTE_TO_SELF, 1], 'grouptok' => [Room::TYPE_GROUP, 3]];
	private const PDF = "%PDF-1.7\nquarterly figures\n";

	protected function harness(string $url): Harness {
		$h = new Harness($url, self::SECRET, self::ROOMS);
		$h->directory->addUser('alice', 'Alice Liddell', 'alice@example.com');
		$h->directory->addUser('bob', 'Bob', null, ['staff']);
		$h->directory->addUser(AppSettings::DEFAULT_BOT_USER, 'Istota');
		return $h;
	}

	/** The event the sidecar received, decoded. */
	private function received(): array {
		$events = self::$sidecar->events();
		$this->assertCount(1, $events);
		return $events[0]['payload'];
	}

	private function dispatch(BotInvokeEvent $event, ?Harness $h = null): BotInvokeEvent {
		(new BotInvokeListener(($h ?? $this->h)->forwarder))->handle($event);
		return $event;
	}

	/**
	 * A file shared into the chat as Talk hands it to app bots (talk-bots.md §4.5, §12):
	 * an Activity with parameters.file, every value a string.
	 */
	private static function fileShare(int|string $fileId, string $fileName, string $caption = '{file}', string $objectName = '', string $actor = 'users/alice', string $token = 'notetok', string $messageId = '77'): BotInvokeEvent {
		return new BotInvokeEvent('nextcloudapp://istota', [
			'type' => 'Activity',
			'actor' => ['type' => 'Person', 'id' => $actor, 'name' => 'Alice Liddell'],
			'object' => [
				'type' => 'Note',
				'id' => $messageId,
				'name' => $objectName,
				'content' => json_encode(['message' => $caption, 'parameters' => [
					'actor' => ['type' => 'user', 'id' => 'alice', 'name' => 'Alice Liddell'],
					'file' => [
						'type' => 'file', 'id' => (string)$fileId, 'name' => $fileName, 'size' => '27',
						'path' => $fileName, 'link' => 'https://cloud.example.com/s/Xq3bTz9kL', 'etag' => 'a1b2c3',
						'permissions' => '27', 'mimetype' => 'application/pdf', 'preview-available' => 'no', 'hide-download' => 'no',
					],
				]], JSON_UNESCAPED_UNICODE),
				'mediaType' => 'text/markdown',
			],
			'target' => ['type' => 'Collection', 'id' => $token, 'name' => 'Room ' . $token],
		]);
	}

	/** @return array<string, array{0: string, 1: string}> */
	public function shareShapes(): array {
		return [
			'Talk 22 and older, no caption' => ['', '{file}'],
			'Talk 23, no caption' => ['message', '{file}'],
			'caption naming the bot' => ['message', '@Istota summarise this'],
		];
	}

	/** @dataProvider shareShapes */
	public function testAFileSharedByAnAllowedUserIsCopiedIntoTheBotsInbox(string $objectName, string $caption): void {
		$id = $this->h->files->put('alice', 'Documents/report.pdf', self::PDF);
		$event = $this->dispatch(self::fileShare($id, 'report.pdf', $caption, $objectName));

		$payload = $this->received();
		$this->assertSame([
			['name' => 'report.pdf', 'path' => 'inbox/report.pdf', 'mimetype' => 'application/pdf', 'size' => strlen(self::PDF)],
		], $payload['attachments']);
		$this->assertArrayNotHasKey('attachment_errors', $payload);
		$this->assertSame($event->getMessage(), $payload['event'], 'the event itself is passed through unchanged');
		$this->assertSame('alice', $payload['sender']['uid']);

		$this->assertSame(['Users/alice/inbox/report.pdf' => self::PDF], $this->h->files->contents('istota'), 'the copy is in the bot\'s storage, at /Users/{uid}/inbox');
		$this->assertSame(['Documents/report.pdf' => self::PDF], $this->h->files->contents('alice'), 'the original stays');
		$this->assertSame([], $this->h->logger->messages('warning'));
	}

	public function testTheBotUserFromTheAppConfigIsUsed(): void {
		$this->h->directory->addUser('assistant', 'Istota');
		$this->h->appConfig->setValueString(Application::APP_ID, AppSettings::KEY_BOT_USER, 'assistant');
		$this->dispatch(self::fileShare($this->h->files->put('alice', 'a.txt', 'hello'), 'a.txt'));
		$this->assertSame(['Users/alice/inbox/a.txt' => 'hello'], $this->h->files->contents('assistant'));
		$this->assertSame([], $this->h->files->contents('istota'));
	}

	public function testNameCollisionsNeverOverwrite(): void {
		$this->h->files->put('istota', 'Users/alice/inbox/report.pdf', 'older');
		$this->h->files->put('istota', 'Users/alice/inbox/notes', 'older notes');
		$report = $this->h->files->put('alice', 'report.pdf', self::PDF);
		$notes = $this->h->files->put('alice', 'x/notes', 'new notes');

		$this->dispatch(self::fileShare($report, 'report.pdf', messageId: '1'));
		$this->dispatch(self::fileShare($report, 'report.pdf', messageId: '2'));
		$this->dispatch(self::fileShare($notes, 'notes', messageId: '3'));

		$paths = array_map(static fn (array $e): string => $e['payload']['attachments'][0]['path'], self::$sidecar->events());
		$this->assertSame(['inbox/report (2).pdf', 'inbox/report (3).pdf', 'inbox/notes (2)'], $paths);
		$this->assertSame([
			'notes' => 'older notes',
			'notes (2)' => 'new notes',
			'report (2).pdf' => self::PDF,
			'report (3).pdf' => self::PDF,
			'report.pdf' => 'older',
		], $this->h->files->contents('istota', 'Users/alice/inbox'));
	}

	public function testUnsafeNamesAreCleaned(): void {
		$id = $this->h->files->put('alice', " ..hidden\x07 notes.txt", 'text');
		$this->dispatch(self::fileShare($id, " ..hidden\x07 notes.txt"));
		$attachment = $this->received()['attachments'][0];
		$this->assertSame('..hidden notes.txt', $attachment['name']);
		$this->assertSame('inbox/hidden notes.txt', $attachment['path']);
		$this->assertSame(['Users/alice/inbox/hidden notes.txt' => 'text'], $this->h->files->contents('istota'));
	}

	public function testFilesOverTheLimitAreSkippedBeforeReading(): void {
		$this->h->appConfig->setValueInt(Application::APP_ID, AppSettings::KEY_MAX_ATTACHMENT_MB, 1);
		$big = $this->h->files->put('alice', 'big.bin', str_repeat('x', 1024 * 1024 + 1));
		$exact = $this->h->files->put('alice', 'exact.bin', str_repeat('y', 1024 * 1024));

		$this->dispatch(self::fileShare($big, 'big.bin', messageId: '1'));
		$this->assertSame([], $this->h->files->opened, 'a file over the limit is never opened');
		$this->dispatch(self::fileShare($exact, 'exact.bin', messageId: '2'));

		[$first, $second] = array_column(self::$sidecar->events(), 'payload');
		$this->assertArrayNotHasKey('attachments', $first);
		$this->assertSame([['name' => 'big.bin', 'reason' => 'it is larger than the 1 MB limit for files shared with the bot']], $first['attachment_errors']);
		$this->assertSame([['name' => 'exact.bin', 'path' => 'inbox/exact.bin', 'mimetype' => 'application/octet-stream', 'size' => 1024 * 1024]], $second['attachments']);
		$this->assertSame(['Users/alice/inbox/exact.bin'], array_keys($this->h->files->contents('istota')));
	}

	public function testTheDefaultLimitIsFiftyMegabytes(): void {
		$id = $this->h->files->put('alice', 'video.mp4', 'tiny on disk');
		$this->h->files->reportedSizes['/alice/files/video.mp4'] = 50 * 1024 * 1024 + 1;
		$this->dispatch(self::fileShare($id, 'video.mp4'));
		$this->assertSame('it is larger than the 50 MB limit for files shared with the bot', $this->received()['attachment_errors'][0]['reason']);
		$this->assertSame([], $this->h->files->opened);
		$this->assertSame([], $this->h->files->contents('istota'));
	}

	public function testALimitSetWithOccWithoutATypeWorks(): void {
		$this->h->appConfig->setMixed(Application::APP_ID, AppSettings::KEY_MAX_ATTACHMENT_MB, '1');
		$this->dispatch(self::fileShare($this->h->files->put('alice', 'big.bin', str_repeat('x', 1024 * 1024 + 1)), 'big.bin'));
		$this->assertSame('it is larger than the 1 MB limit for files shared with the bot', $this->received()['attachment_errors'][0]['reason']);
	}

	public function testAnUnknownSizeIsReadOnlyUpToTheLimit(): void {
		$this->h->appConfig->setValueInt(Application::APP_ID, AppSettings::KEY_MAX_ATTACHMENT_MB, 1);
		$small = $this->h->files->put('alice', 'small.txt', 'small');
		$large = $this->h->files->put('alice', 'large.txt', str_repeat('z', 1024 * 1024 + 10));
		$this->h->files->reportedSizes['/alice/files/small.txt'] = -1;
		$this->h->files->reportedSizes['/alice/files/large.txt'] = -1;

		$this->dispatch(self::fileShare($small, 'small.txt', messageId: '1'));
		$this->dispatch(self::fileShare($large, 'large.txt', messageId: '2'));

		[$first, $second] = array_column(self::$sidecar->events(), 'payload');
		$this->assertSame([['name' => 'small.txt', 'path' => 'inbox/small.txt', 'mimetype' => 'text/plain', 'size' => 5]], $first['attachments']);
		$this->assertSame('it is larger than the 1 MB limit for files shared with the bot', $second['attachment_errors'][0]['reason']);
		$this->assertSame(['Users/alice/inbox/small.txt' => 'small'], $this->h->files->contents('istota'));
	}

	/** @return array<string, array{0: string}> */
	public function missingFiles(): array {
		return [
			'no such file id' => ['999999'],
			'another user\'s file' => ['bob'],
		];
	}

	/** @dataProvider missingFiles */
	public function testAFileTheSharerCannotResolveIsReported(string $which): void {
		$id = $which === 'bob' ? $this->h->files->put('bob', 'private.pdf', 'bob only') : (int)$which;
		$this->dispatch(self::fileShare($id, 'private.pdf'));
		$payload = $this->received();
		$this->assertArrayNotHasKey('attachments', $payload);
		$this->assertSame([['name' => 'private.pdf', 'reason' => 'the file was not found in the sender\'s files']], $payload['attachment_errors']);
		$this->assertSame([], $this->h->files->contents('istota'));
	}

	public function testAnUnreadableFileIsReported(): void {
		$id = $this->h->files->put('alice', 'locked.pdf', 'secret');
		$this->h->files->unreadable[] = '/alice/files/locked.pdf';
		$this->dispatch(self::fileShare($id, 'locked.pdf'));
		$this->assertSame('the file was not found in the sender\'s files', $this->received()['attachment_errors'][0]['reason']);
		$this->assertSame([], $this->h->files->opened);
	}

	public function testFoldersAreNotCopied(): void {
		$id = $this->h->files->makeFolder('alice', 'Projects');
		$this->dispatch(self::fileShare($id, 'Projects'));
		$this->assertSame([['name' => 'Projects', 'reason' => 'folders are not copied']], $this->received()['attachment_errors']);
	}

	/** @return array<string, array{0: string, 1: ?list<string>}> */
	public function sendersWithoutCopy(): array {
		return [
			'user the sidecar does not allow' => ['users/alice', ['staff']],
			'guest' => ['guests/5f2c0a', null],
			'federated user' => ['federated_users/carol@other.example.com', null],
		];
	}

	/**
	 * @dataProvider sendersWithoutCopy
	 * @param ?list<string> $accessGroups the sidecar's access.groups
	 */
	public function testNoCopyForSendersWhoMayNotUseTheBot(string $actor, ?array $accessGroups): void {
		if ($accessGroups !== null) {
			self::$sidecar->control(['access_groups' => $accessGroups]);
		}
		$id = $this->h->files->put('alice', 'report.pdf', self::PDF);
		$this->dispatch(self::fileShare($id, 'report.pdf', actor: $actor));

		$payload = $this->received();
		$this->assertArrayNotHasKey('attachments', $payload);
		$this->assertArrayNotHasKey('attachment_errors', $payload);
		$this->assertSame([], $this->h->files->opened);
		$this->assertSame([], $this->h->files->contents('istota'));
	}

	public function testOtherEventsAreUntouched(): void {
		$id = $this->h->files->put('alice', 'report.pdf', self::PDF);
		$fileParameter = ['type' => 'file', 'id' => (string)$id, 'name' => 'report.pdf'];
		$events = [
			'call started' => ['Activity', 'call_started', ['message' => '{actor} started a call', 'parameters' => ['actor' => ['type' => 'user', 'id' => 'alice']]]],
			'message deleted' => ['Activity', 'message_deleted', ['message' => '{actor} deleted a message', 'parameters' => ['file' => $fileParameter]]],
			'chat message' => ['Create', 'message', ['message' => 'hello', 'parameters' => ['file' => $fileParameter]]],
			'shared poll' => ['Activity', 'message', ['message' => '{object}', 'parameters' => ['object' => ['type' => 'talk-poll', 'id' => '3', 'name' => 'Lunch?']]]],
			'deck card' => ['Activity', '', ['message' => '{file}', 'parameters' => ['file' => ['type' => 'deck-card', 'id' => (string)$id, 'name' => 'Card']]]],
		];
		$n = 0;
		foreach ($events as [$type, $name, $content]) {
			$this->dispatch(new BotInvokeEvent('nextcloudapp://istota', [
				'type' => $type,
				'actor' => ['type' => 'Person', 'id' => 'users/alice', 'name' => 'Alice Liddell'],
				'object' => ['type' => 'Note', 'id' => (string)++$n, 'name' => $name, 'content' => json_encode($content), 'mediaType' => 'text/markdown'],
				'target' => ['type' => 'Collection', 'id' => 'notetok', 'name' => 'Room'],
			]));
		}
		$received = self::$sidecar->events();
		$this->assertCount(count($events), $received);
		foreach ($received as $i => $e) {
			$this->assertSame(['bot_url', 'event', 'sender', 'conversation', 'received_at'], array_keys($e['payload']), array_keys($events)[$i]);
		}
		$this->assertSame([], $this->h->files->opened);
		$this->assertFalse(is_dir($this->h->files->local('/istota/files/Users')), 'nothing is created in the bot\'s storage');
	}

	public function testWithoutTheBotAccountTheEventStillGoesThrough(): void {
		unset($this->h->directory->users['istota']);
		$this->dispatch(self::fileShare($this->h->files->put('alice', 'report.pdf', self::PDF), 'report.pdf'));
		$this->assertSame([['name' => 'report.pdf', 'reason' => 'the bot account is not set up yet (occ istota:setup)']], $this->received()['attachment_errors']);
		$this->assertSame([], $this->h->files->opened);
	}

	public function testAFailedWriteLeavesNoPartialFile(): void {
		$this->h->files->writeFailure = new NotPermittedException('storage backend exploded at /srv/data');
		$this->dispatch(self::fileShare($this->h->files->put('alice', 'report.pdf', self::PDF), 'report.pdf'));

		$payload = $this->received();
		$this->assertSame([['name' => 'report.pdf', 'reason' => 'it could not be saved in the bot\'s storage']], $payload['attachment_errors']);
		$this->assertStringNotContainsString('/srv/data', json_encode($payload), 'internals stay in the log');
		$this->assertSame([], $this->h->files->contents('istota'), 'the partial file is removed');
		$this->assertCount(1, $this->h->logger->messages('warning'));
		$this->assertSame([], $this->h->logger->messages('error'));
	}

	public function testAFullStorageIsReportedBeforeCopying(): void {
		$this->h->files->freeSpace = 10;
		$this->dispatch(self::fileShare($this->h->files->put('alice', 'report.pdf', self::PDF), 'report.pdf'));
		$this->assertSame('there is no room for it in the bot\'s storage', $this->received()['attachment_errors'][0]['reason']);
		$this->assertSame([], $this->h->files->opened);
	}

	public function testAnInboxThatIsNotAFolderIsReported(): void {
		$this->h->files->put('istota', 'Users/alice/inbox', 'a file where the folder should be');
		$this->dispatch(self::fileShare($this->h->files->put('alice', 'report.pdf', self::PDF), 'report.pdf'));
		$this->assertSame('the inbox folder in the bot\'s storage is not a folder', $this->received()['attachment_errors'][0]['reason']);
	}

	public function testAnUnexpectedFailureNeverBreaksTheListener(): void {
		$id = $this->h->files->put('alice', 'report.pdf', self::PDF);
		$this->h->files->lookupFailure = new \LogicException('file cache corrupted at /srv/data');
		$this->dispatch(self::fileShare($id, 'report.pdf'));

		$payload = $this->received();
		$this->assertSame([['name' => 'report.pdf', 'reason' => 'it could not be copied']], $payload['attachment_errors']);
		$this->assertStringNotContainsString('/srv/data', json_encode($payload));
		$this->assertCount(1, $this->h->logger->messages('warning'));
		$this->assertSame([], $this->h->logger->messages('error'));
	}

	/** @return array<string, array{0: string}> */
	public function badFileIds(): array {
		return [
			'empty' => [''],
			'zero' => ['0'],
			'negative' => ['-5'],
			'not a number' => ['12abc'],
		];
	}

	/** @dataProvider badFileIds */
	public function testABadFileIdIsReported(string $id): void {
		$this->dispatch(self::fileShare($id, 'report.pdf'));
		$this->assertSame([['name' => 'report.pdf', 'reason' => 'Talk did not say which file it is']], $this->received()['attachment_errors']);
	}

	public function testAnOverflowingFileIdIsNotFound(): void {
		$this->h->files->put('alice', 'report.pdf', self::PDF);
		$this->dispatch(self::fileShare('99999999999999999999999', 'report.pdf'));
		$this->assertSame('the file was not found in the sender\'s files', $this->received()['attachment_errors'][0]['reason']);
	}

	public function testTheSidecarIsAskedOnceAndItsAnswerIsCached(): void {
		self::$sidecar->control(['access_groups' => ['staff']]);
		$this->dispatch(self::fileShare($this->h->files->put('bob', 'a.pdf', self::PDF), 'a.pdf', actor: 'users/bob', messageId: '1'));
		$this->dispatch(self::fileShare($this->h->files->put('bob', 'b.pdf', self::PDF), 'b.pdf', actor: 'users/bob', messageId: '2'));

		$sessions = array_values(array_filter(self::$sidecar->requests(), static fn (array $r): bool => $r['uri'] === '/v1/users/bob/session'));
		$this->assertCount(1, $sessions, 'the second file uses the cached answer');
		$profile = self::$sidecar->users()['bob'];
		$this->assertSame(['staff'], $profile['groups']);
		$this->assertFalse($profile['is_admin']);
		$this->assertSame(['Users/bob/inbox/a.pdf' => self::PDF, 'Users/bob/inbox/b.pdf' => self::PDF], $this->h->files->contents('istota'));
	}

	public function testWhenTheSidecarCannotBeAskedNoCopyIsMadeAndTheUserIsTold(): void {
		$h = $this->harness(FakeSidecar::deadUrl());
		try {
			$id = $h->files->put('alice', 'report.pdf', self::PDF);
			$this->dispatch(self::fileShare($id, 'report.pdf'), $h);

			$rows = $h->outbox->head(10);
			$this->assertCount(1, $rows, 'the event waits in the outbox');
			$body = json_decode($rows[0]->body, true);
			$this->assertSame([['name' => 'report.pdf', 'reason' => AttachmentImporter::ACCESS_UNKNOWN]], $body['attachment_errors']);
			$this->assertArrayNotHasKey('attachments', $body);
			$this->assertSame([], $h->files->opened);
			$this->assertSame([], $h->files->contents('istota'));
		} finally {
			$h->close();
		}
	}

	public function testTheCopyIsMadeOnceAndTravelsWithTheOutbox(): void {
		$h = $this->harness(self::$sidecar->url);
		try {
			// A message earlier in the minute asked the sidecar; then it went down.
			$this->assertTrue($h->sessions->mayUse('alice'));
			$h->settings->setSidecarUrl(FakeSidecar::deadUrl());
			$id = $h->files->put('alice', 'report.pdf', self::PDF);
			$this->dispatch(self::fileShare($id, 'report.pdf'), $h);

			$rows = $h->outbox->head(10);
			$this->assertCount(1, $rows);
			$body = json_decode($rows[0]->body, true);
			$this->assertSame([['name' => 'report.pdf', 'path' => 'inbox/report.pdf', 'mimetype' => 'application/pdf', 'size' => strlen(self::PDF)]], $body['attachments']);
			$this->assertSame(['Users/alice/inbox/report.pdf' => self::PDF], $h->files->contents('istota'));
		} finally {
			$h->close();
		}
	}
}
