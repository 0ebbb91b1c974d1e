<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Unit\Controller;

use OCA\Istota\Tests\Support\HarnessTestCase;
use OCP\AppFramework\Http\DataResponse;

/**
 * The personal page's OCS API end to end: controller → service → signed HTTP → the fake
 * sidecar (which checks every signature and keeps users' data apart), and back.
 */
class UserApiTest extends HarnessTestCase {
	protected function setUp(): void {
		parent::setUp();
		$this->h->directory->addUser('alice', 'Alice Liddell', 'alice@example.com', ['staff'], ['timezone' => 'Europe/Berlin', 'lang' => 'de']);
		$this->h->directory->addUser('bob', 'Bob', 'bob@example.com');
		$this->h->directory->addUser('eve@example.org', 'Eve');
		$this->h->loginAs('alice');
	}

	/** @return array{0: int, 1: mixed} */
	private static function result(DataResponse $response): array {
		return [$response->getStatus(), $response->getData()];
	}

	/** Makes the sidecar know $uid, as any page load does. */
	private function open(string $uid): void {
		$this->h->loginAs($uid);
		$this->assertSame(200, $this->h->meController()->me()->getStatus());
	}

	/** @return list<string> the paths the sidecar was asked for */
	private static function paths(): array {
		return array_map(static fn (array $r): string => $r['uri'], self::$sidecar->requests());
	}

	public function testMeTellsTheSidecarWhoTheUserIsAndPassesOnlyTheContractBack(): void {
		[$status, $data] = self::result($this->h->meController()->me());
		$this->assertSame(200, $status);
		$this->assertSame(['allowed' => true, 'istota_admin' => false, 'bot_name' => 'Istota', 'files_path' => '/istota'], $data);
		$this->assertSame([
			'display_name' => 'Alice Liddell',
			'email' => 'alice@example.com',
			'timezone' => 'Europe/Berlin',
			'language' => 'de',
			'groups' => ['staff'],
			'is_admin' => false,
		], self::$sidecar->users()['alice']);
	}

	public function testStatusOpensTheSessionOnceAMinute(): void {
		[$status, $data] = self::result($this->h->meController()->status());
		$this->assertSame(200, $status);
		$this->assertSame(11, $data['running']['id']);
		$this->assertSame('Europe/Berlin', $data['timezone']);
		$this->assertSame(1200, $data['usage']['today']['input_tokens']);

		$this->h->clock->now = time() + 30;
		$this->h->meController()->status();
		$this->assertSame(['/v1/users/alice/session', '/v1/users/alice/status', '/v1/users/alice/status'], self::paths(),
			'a new request within 60 s uses the cached session');

		$this->h->clock->now = time() + 61;
		$this->h->meController()->status();
		$this->assertSame('/v1/users/alice/session', self::paths()[3]);
	}

	public function testEventsStopAndTheirParameters(): void {
		$this->open('alice');
		[$status, $data] = self::result($this->h->meController()->events(11, 1));
		$this->assertSame(200, $status);
		$this->assertSame([2, 3], array_column($data['events'], 'seq'));
		$this->assertSame('/v1/users/alice/tasks/11/events?after=1', self::paths()[1]);

		$this->assertSame([400, 'invalid_request'], [$this->h->meController()->events(0)->getStatus(), $this->h->meController()->events(0)->getData()['code']]);
		$this->assertSame(400, $this->h->meController()->events(11, -1)->getStatus());

		$this->assertSame([200, ['stopped' => 1, 'dropped' => 2]], self::result($this->h->meController()->stop()));
	}

	/**
	 * User A can never reach user B: every path names the logged-in user, and what belongs
	 * to B answers 404 exactly like what does not exist.
	 */
	public function testAUserCannotReachAnotherUsersTasksFactsOrJobs(): void {
		$this->open('bob');
		$this->open('alice');
		$cases = [
			'bob\'s task' => fn () => $this->h->meController()->events(21),
			'a task nobody has' => fn () => $this->h->meController()->events(99),
			'bob\'s fact, invalidate' => fn () => $this->h->memoryController()->invalidateFact(3),
			'bob\'s fact, delete' => fn () => $this->h->memoryController()->deleteFact(3),
		];
		foreach ($cases as $name => $call) {
			[$status, $data] = self::result($call());
			$this->assertSame([404, 'not_found'], [$status, $data['code']], $name);
		}
		$this->h->loginAs('bob');
		[$status, $data] = self::result($this->h->scheduleController()->jobAction('morning', 'run'));
		$this->assertSame([404, 'not_found'], [$status, $data['code']], 'alice\'s job, asked by bob');

		$facts = $this->h->memoryController()->facts()->getData()['facts'];
		$this->assertSame([3], array_column($facts, 'id'), 'bob still has his fact');

		foreach (array_slice(self::paths(), 2) as $path) {
			$this->assertMatchesRegularExpression('#^/v1/users/(alice|bob)/#', $path);
		}
		$bobPaths = array_filter(array_slice(self::paths(), 2), static fn (string $p): bool => str_starts_with($p, '/v1/users/bob/'));
		$this->assertCount(2, $bobPaths, 'only bob\'s own two calls name bob');
	}

	public function testAUserIdIsOnePercentEncodedSegment(): void {
		$this->open('eve@example.org');
		[$status] = self::result($this->h->meController()->status());
		$this->assertSame(200, $status, 'the sidecar accepted the signature over the encoded path');
		$this->assertContains('/v1/users/eve%40example.org/status', self::paths());
		$this->assertArrayHasKey('eve@example.org', self::$sidecar->users());
	}

	public function testAUserTheSidecarDoesNotAllowGetsForbidden(): void {
		self::$sidecar->control(['access_groups' => ['admins-only']]);
		[$status, $data] = self::result($this->h->meController()->me());
		$this->assertSame(200, $status);
		$this->assertFalse($data['allowed']);
		[$status, $data] = self::result($this->h->meController()->status());
		$this->assertSame([403, 'not_allowed', 'you may not use Istota'], [$status, $data['code'], $data['message']]);
	}

	public function testNobodyLoggedInGetsUnauthorisedWithoutASidecarCall(): void {
		$this->h->loginAs(null);
		foreach ([
			$this->h->meController()->me(),
			$this->h->meController()->wsToken(),
			$this->h->memoryController()->userMemory(),
			$this->h->scheduleController()->schedule(),
			$this->h->personalSettingsController()->get(),
		] as $response) {
			$this->assertSame([401, 'not_logged_in'], [$response->getStatus(), $response->getData()['code']]);
		}
		$this->assertSame([], $this->h->http->requests);
	}

	public function testUserMemoryIsSavedWithConflictDetection(): void {
		$this->open('alice');
		$memory = $this->h->memoryController();
		[$status, $data] = self::result($memory->userMemory());
		$this->assertSame([200, ''], [$status, $data['content']]);
		$this->assertSame('"' . hash('sha256', '') . '"', $data['etag']);

		[$status, $saved] = self::result($memory->saveUserMemory("# Alice\nLikes tea.\n", $data['etag']));
		$this->assertSame(200, $status);
		$this->assertSame('"' . hash('sha256', "# Alice\nLikes tea.\n") . '"', $saved['etag']);

		// Changed in Files meanwhile: the old ETag no longer fits.
		self::$sidecar->setUserMemory('alice', "# Alice\nLikes coffee.\n");
		[$status, $conflict] = self::result($memory->saveUserMemory('mine', $saved['etag']));
		$this->assertSame(409, $status);
		$this->assertSame('conflict', $conflict['code']);
		$this->assertSame('"' . hash('sha256', "# Alice\nLikes coffee.\n") . '"', $conflict['current_etag']);
		$this->assertArrayNotHasKey('fields', $conflict);
	}

	public function testUserMemorySaveWhileNextcloudIsDownSaysSo(): void {
		$this->open('alice');
		self::$sidecar->control(['webdav_down' => true]);
		[$status, $data] = self::result($this->h->memoryController()->saveUserMemory('new', '"' . hash('sha256', '') . '"'));
		$this->assertSame([503, 'unavailable'], [$status, $data['code']]);
		$this->assertSame('Nextcloud cannot be reached; your edit is kept and will be synced', $data['message']);
	}

	/** @return array<string, array{0: mixed, 1: mixed}> */
	public function badUserMemory(): array {
		return [
			'content missing' => [null, '"x"'],
			'content not text' => [['a'], '"x"'],
			'etag missing' => ['text', null],
			'too large' => [str_repeat('a', 65537), '"x"'],
		];
	}

	/** @dataProvider badUserMemory */
	public function testBadUserMemoryIsRefusedBeforeTheSidecar(mixed $content, mixed $etag): void {
		[$status, $data] = self::result($this->h->memoryController()->saveUserMemory($content, $etag));
		$this->assertSame([400, 'invalid_request'], [$status, $data['code']]);
		$this->assertSame([], $this->h->http->requests);
	}

	public function testMemoryListsAndSearch(): void {
		$this->open('alice');
		$memory = $this->h->memoryController();
		$this->assertCount(3, $memory->audit(1000)->getData()['entries']);
		$this->assertSame('Room of alice', $memory->channels()->getData()['channels'][0]['name']);
		$this->assertSame('within 366 days', $memory->dated(9999)->getData()['days'][0]['content']);
		$this->assertSame('within 1 days', $memory->dated(-5)->getData()['days'][0]['content']);
		$this->assertSame([1, 2], array_column($memory->facts()->getData()['facts'], 'id'));

		[$status, $data] = self::result($memory->search('  tea & cake/ü?  ', 5000));
		$this->assertSame(200, $status);
		$this->assertSame('found tea & cake/ü?', $data['results'][0]['text']);
		$this->assertSame(100, $data['limit']);
		$this->assertContains('/v1/users/alice/memory/search?q=tea%20%26%20cake%2F%C3%BC%3F&limit=100', self::paths());
		$this->assertContains('/v1/users/alice/memory/audit?limit=500', self::paths());

		$this->assertSame(400, $memory->search('   ')->getStatus());
		$this->assertSame(400, $memory->search(str_repeat('x', 501))->getStatus());
	}

	public function testFactsAreInvalidatedAndDeleted(): void {
		$this->open('alice');
		$memory = $this->h->memoryController();
		$this->assertSame([200, ['ok' => true]], self::result($memory->invalidateFact(1)));
		$this->assertSame([200, ['ok' => true]], self::result($memory->deleteFact(2)));
		$facts = $memory->facts()->getData()['facts'];
		$this->assertSame([1], array_column($facts, 'id'));
		$this->assertNotNull($facts[0]['valid_until']);
		$this->assertSame(404, $memory->deleteFact(2)->getStatus(), 'gone is gone');
		$this->assertSame(400, $memory->deleteFact(0)->getStatus());
	}

	public function testScheduleAndJobActions(): void {
		$this->open('alice');
		$schedule = $this->h->scheduleController();
		[$status, $data] = self::result($schedule->schedule());
		$this->assertSame(200, $status);
		$this->assertSame(['morning', 'locked'], array_column($data['jobs'], 'name'));
		$this->assertSame([['line' => 12, 'field' => 'cron', 'message' => 'bad cron expression']], $data['cron_file']['problems']);

		[$status, $job] = self::result($schedule->jobAction('morning', 'disable'));
		$this->assertSame([200, false], [$status, $job['enabled']]);

		[$status, $data] = self::result($schedule->jobAction('locked', 'enable'));
		$this->assertSame([409, 'conflict', 'CRON.md disables this job (line 9); change it there'], [$status, $data['code'], $data['message']]);

		[$status, $data] = self::result($schedule->jobAction('morning run/x', 'run'));
		$this->assertSame([404, 'not_found'], [$status, $data['code']]);
		$this->assertContains('/v1/users/alice/schedule/jobs/morning%20run%2Fx/run', self::paths());

		$this->assertSame(400, $schedule->jobAction('morning', 'delete')->getStatus());
		$this->assertSame(400, $schedule->jobAction('', 'run')->getStatus());
	}

	public function testPersonalSettingsSendOnlyWhatChangedAndShowFieldErrors(): void {
		$this->open('alice');
		$settings = $this->h->personalSettingsController();
		[$status, $data] = self::result($settings->get());
		$this->assertSame([200, 'Europe/Berlin'], [$status, $data['timezone']]);

		[$status, $data] = self::result($settings->update(timezone: 'Europe/Paris'));
		$this->assertSame([200, 'Europe/Paris'], [$status, $data['timezone']]);
		$bodies = self::$sidecar->bodies();
		$this->assertSame(['method' => 'PUT', 'path' => '/v1/users/alice/settings', 'body' => ['timezone' => 'Europe/Paris']], end($bodies));

		[$status, $data] = self::result($settings->update(timezone: 'Mars/Olympus', emails: ['me@example.org', 'taken@example.org']));
		$this->assertSame(422, $status);
		$this->assertSame('invalid_settings', $data['code']);
		$this->assertSame(['timezone' => 'not an IANA time zone', 'emails.1' => 'already claimed by another user'], $data['fields']);
	}
}
