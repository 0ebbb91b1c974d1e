<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Unit\Controller;

use OCA\Istota\Service\RequestSigner;
use OCA\Istota\Tests\Support\Harness;
use OCA\Istota\Tests\Support\TestRequest;
use OCA\Talk\Model\BotConversation;
use OCA\Talk\Room;
use OCP\AppFramework\Http\DataResponse;
use PHPUnit\Framework\TestCase;

/**
 * The routes the sidecar's nextcloud skill calls, through the controller as Nextcloud
 * routes them: signed requests only, the user's own files only (real files in a temporary
 * directory), Nextcloud's share manager rules, Talk participation and the bot's presence.
 */
class NextcloudDelegateTest extends TestCase {
	private const SECRET = 'delegate-test-shared-secret-0123456789-abcdefghij';
	private const BASE = '/ocs/v2.php/apps/istota/api/v1/sidecar/nextcloud/';

	private Harness $h;

	protected function setUp(): void {
		$this->h = new Harness('http://127.0.0.1:1', self::SECRET, [
			'team1234' => [Room::TYPE_GROUP, 2],
			'other123' => [Room::TYPE_GROUP, 1],
			'readonly1' => [Room::TYPE_GROUP, 2],
			'nobot123' => [Room::TYPE_GROUP, 2],
		]);
		$this->h->directory->addUser('alice', 'Alice', null, ['staff']);
		$this->h->directory->addUser('bob', 'Bob', null, ['staff']);
		$this->h->directory->addUser('carol', 'Carol');
		$this->h->files->put('alice', 'Documents/report.txt', "alice's report\n");
		$this->h->files->put('bob', 'Private/diary.txt', "bob's diary\n");
		// A folder bob shared with alice, mounted in her files.
		$this->h->files->put('alice', 'FromBob/plan.txt', "bob's plan\n");
		$this->h->files->sharedIn['/alice/files/FromBob'] = 'bob';

		foreach ([
			'team1234' => ['Team', Room::READ_WRITE],
			'other123' => ['Bob only', Room::READ_WRITE],
			'readonly1' => ['Announcements', Room::READ_ONLY],
			'nobot123' => ['No bot here', Room::READ_WRITE],
		] as $token => [$name, $readOnly]) {
			$this->h->rooms->addRoom(new Room(Room::TYPE_GROUP, $token, $name, $readOnly));
		}
		$this->h->rooms->members = ['team1234' => ['alice', 'bob'], 'other123' => ['bob'], 'readonly1' => ['alice', 'bob'], 'nobot123' => ['alice']];
		$this->h->participants->permissions = [
			'team1234' => ['alice' => 254, 'bob' => 254],
			'other123' => ['bob' => 254],
			'readonly1' => ['alice' => 254, 'bob' => 254],
			'nobot123' => ['alice' => 254],
		];
		foreach (['team1234', 'other123', 'readonly1'] as $token) {
			$row = new BotConversation();
			$row->setBotId(Harness::BOT_ID);
			$row->setToken($token);
			$row->setState(1);
			$this->h->botConversations->insert($row);
		}
	}

	protected function tearDown(): void {
		$this->h->close();
	}

	/** @param array<string, mixed> $body */
	private function call(string $route, array $body, ?array $headers = null): DataResponse {
		$raw = (string)json_encode($body);
		$uri = self::BASE . $route;
		$headers ??= (new RequestSigner())->headers(self::SECRET, 'POST', $uri, $raw, time());
		$controller = $this->h->sidecarController(new TestRequest('POST', $headers + ['OCS-APIRequest' => 'true'], [], $uri), $raw);
		return match ($route) {
			'share' => $controller->share(),
			'shares' => $controller->shares(),
			'mkdir' => $controller->mkdir(),
			'conversations' => $controller->conversations(),
			'post-target' => $controller->postTarget(),
		};
	}

	private function assertRefused(DataResponse $r, int $status, string $code, string $inMessage = ''): void {
		$this->assertSame($status, $r->getStatus(), json_encode($r->getData()));
		$this->assertSame($code, $r->getData()['code']);
		if ($inMessage !== '') {
			$this->assertStringContainsString($inMessage, $r->getData()['message']);
		}
	}

	public function testUnsignedOrWronglySignedCallsAreRefusedAndThrottled(): void {
		$body = ['user' => 'alice', 'path' => 'Documents/report.txt', 'type' => 'link'];
		foreach ([
			[],
			(new RequestSigner())->headers('another-secret-0123456789-abcdefghijklmnopq', 'POST', self::BASE . 'share', (string)json_encode($body), time()),
			(new RequestSigner())->headers(self::SECRET, 'POST', self::BASE . 'share', '{"user":"bob"}', time()),
			(new RequestSigner())->headers(self::SECRET, 'POST', self::BASE . 'mkdir', (string)json_encode($body), time()),
		] as $headers) {
			$r = $this->call('share', $body, $headers);
			$this->assertSame(401, $r->getStatus());
			$this->assertTrue($r->isThrottled());
		}
		$this->assertSame([], $this->h->shareManager->shares);
	}

	public function testShareWithAUserAsTheUser(): void {
		$r = $this->call('share', ['user' => 'alice', 'path' => '/Documents/report.txt', 'type' => 'user', 'with' => 'bob', 'note' => 'for Monday']);
		$this->assertSame(200, $r->getStatus(), json_encode($r->getData()));
		$d = $r->getData();
		$this->assertSame(['user', 'Documents/report.txt', 'bob', 'read', 'for Monday'], [$d['type'], $d['path'], $d['with'], $d['permissions'], $d['note']]);
		$share = $this->h->shareManager->shares[$d['id']];
		$this->assertSame('alice', $share->getSharedBy());
		$this->assertSame('alice', $share->getShareOwner());
		$this->assertSame(1, $share->getPermissions());

		// Again: Nextcloud's "already shared", as a clear refusal.
		$this->assertRefused($this->call('share', ['user' => 'alice', 'path' => 'Documents/report.txt', 'type' => 'user', 'with' => 'bob']), 403, 'already_shared', 'already shared');
		$this->assertCount(1, $this->h->shareManager->shares);
	}

	public function testEditSharesOfAFolderAndAGroup(): void {
		$r = $this->call('share', ['user' => 'alice', 'path' => 'Documents', 'type' => 'group', 'with' => 'staff', 'permissions' => 'edit', 'expires' => '2099-01-31']);
		$this->assertSame(200, $r->getStatus(), json_encode($r->getData()));
		$this->assertSame(['group', 'staff', 'edit', '2099-01-31'], [$r->getData()['type'], $r->getData()['with'], $r->getData()['permissions'], $r->getData()['expires']]);
		$this->assertSame(15, $this->h->shareManager->shares[$r->getData()['id']]->getPermissions());
		// Editing a single file: read and update, never create or delete.
		$r = $this->call('share', ['user' => 'alice', 'path' => 'Documents/report.txt', 'type' => 'user', 'with' => 'bob', 'permissions' => 'edit']);
		$this->assertSame(3, $this->h->shareManager->shares[$r->getData()['id']]->getPermissions());
	}

	public function testALinkWithExpiryAndPasswordIsMadeOnceForOneRequest(): void {
		$body = ['user' => 'alice', 'path' => 'Documents/report.txt', 'type' => 'link', 'expires' => '2099-12-01', 'password' => 'correct horse battery'];
		$headers = (new RequestSigner())->headers(self::SECRET, 'POST', self::BASE . 'share', (string)json_encode($body), time());
		$r = $this->call('share', $body, $headers);
		$this->assertSame(200, $r->getStatus(), json_encode($r->getData()));
		$d = $r->getData();
		$this->assertSame(['link', '', true, '2099-12-01'], [$d['type'], $d['with'], $d['password'], $d['expires']]);
		$share = $this->h->shareManager->shares[$d['id']];
		$this->assertStringContainsString('token=' . $share->getToken(), $d['url']);
		$this->assertStringNotContainsString('correct horse', json_encode($d));
		$this->assertTrue(password_verify('correct horse battery', $share->getPassword()), 'the manager stored the password hashed');

		// The same signed request again (a replay): the same share, not a second link.
		$again = $this->call('share', $body, $headers);
		$this->assertSame($d['id'], $again->getData()['id']);
		$this->assertCount(1, $this->h->shareManager->shares);
		// A new request makes a new link.
		$this->call('share', $body);
		$this->assertCount(2, $this->h->shareManager->shares);
	}

	public function testNextcloudsSharingRulesApply(): void {
		$this->h->shareManager->enforcePassword = true;
		$this->assertRefused($this->call('share', ['user' => 'alice', 'path' => 'Documents/report.txt', 'type' => 'link']), 403, 'share_refused', 'Passwords are enforced');
		$this->assertRefused($this->call('share', ['user' => 'alice', 'path' => 'Documents/report.txt', 'type' => 'link', 'password' => 'short']), 403, 'share_refused', 'at least 8 characters');
		$this->h->shareManager->allowLinks = false;
		$this->assertRefused($this->call('share', ['user' => 'alice', 'path' => 'Documents/report.txt', 'type' => 'link', 'password' => 'long enough pass']), 403, 'share_refused', 'Link sharing is not allowed');
		$this->assertSame([], $this->h->shareManager->shares);
	}

	/** @return array<string, array{0: array<string, mixed>, 1: int, 2: string, 3: string}> */
	public function refusedShares(): array {
		return [
			'another user\'s path' => [['path' => '../../bob/files/Private/diary.txt', 'type' => 'user', 'with' => 'carol'], 400, 'invalid_request', '".."'],
			'an absolute path into bob\'s files' => [['path' => '/bob/files/Private/diary.txt', 'type' => 'user', 'with' => 'carol'], 400, 'invalid_request', 'no file or folder'],
			'a dot path' => [['path' => 'Documents/./report.txt', 'type' => 'link'], 400, 'invalid_request', '"."'],
			'a file shared with her' => [['path' => 'FromBob/plan.txt', 'type' => 'user', 'with' => 'carol'], 403, 'not_owner', 'belongs to bob'],
			'a folder shared with her' => [['path' => 'FromBob', 'type' => 'link'], 403, 'not_owner', 'belongs to bob'],
			'her home folder' => [['path' => '/', 'type' => 'link'], 400, 'invalid_request', 'home folder'],
			'a missing file' => [['path' => 'Documents/none.txt', 'type' => 'link'], 400, 'invalid_request', 'no file or folder'],
			'an unknown user' => [['path' => 'Documents', 'type' => 'user', 'with' => 'mallory'], 400, 'invalid_request', 'no user "mallory"'],
			'an unknown group' => [['path' => 'Documents', 'type' => 'group', 'with' => 'nobody'], 400, 'invalid_request', 'no group'],
			'herself' => [['path' => 'Documents', 'type' => 'user', 'with' => 'alice'], 400, 'invalid_request', 'yourself'],
			'a link with a recipient' => [['path' => 'Documents', 'type' => 'link', 'with' => 'bob'], 400, 'invalid_request', 'recipient'],
			'a password on a user share' => [['path' => 'Documents', 'type' => 'user', 'with' => 'bob', 'password' => 'secret-pass'], 400, 'invalid_request', 'only links'],
			'a past expiry' => [['path' => 'Documents', 'type' => 'link', 'expires' => '2001-01-01'], 400, 'invalid_request', 'after today'],
			'a malformed expiry' => [['path' => 'Documents', 'type' => 'link', 'expires' => '2099-02-30'], 400, 'invalid_request', 'YYYY-MM-DD'],
			'an unknown type' => [['path' => 'Documents', 'type' => 'email', 'with' => 'x@example.com'], 400, 'invalid_request', 'type must be'],
			'unknown permissions' => [['path' => 'Documents', 'type' => 'link', 'permissions' => 'all'], 400, 'invalid_request', 'permissions'],
			'a control character' => [['path' => "Documents\n", 'type' => 'link'], 400, 'invalid_request', 'control characters'],
		];
	}

	/** @dataProvider refusedShares */
	public function testBadOrForeignSharesAreRefusedClearly(array $body, int $status, string $code, string $message): void {
		$this->assertRefused($this->call('share', ['user' => 'alice'] + $body), $status, $code, $message);
		$this->assertSame([], $this->h->shareManager->shares);
	}

	public function testAUserWhoIsNotThereIsRefused(): void {
		$this->assertRefused($this->call('share', ['user' => 'ghost', 'path' => 'Documents', 'type' => 'link']), 403, 'unknown_user');
		$this->assertRefused($this->call('mkdir', ['path' => 'New']), 403, 'unknown_user');
	}

	public function testListingShowsOnlyTheUsersOwnShares(): void {
		$this->call('share', ['user' => 'alice', 'path' => 'Documents/report.txt', 'type' => 'user', 'with' => 'bob']);
		$this->call('share', ['user' => 'alice', 'path' => 'Documents', 'type' => 'link', 'password' => 'long enough pass']);
		$this->call('share', ['user' => 'bob', 'path' => 'Private/diary.txt', 'type' => 'user', 'with' => 'carol']);
		$r = $this->call('shares', ['user' => 'alice']);
		$this->assertSame(200, $r->getStatus());
		$shares = $r->getData()['shares'];
		$this->assertSame([['Documents', 'link', ''], ['Documents/report.txt', 'user', 'bob']],
			array_map(static fn (array $s): array => [$s['path'], $s['type'], $s['with']], $shares));
		$r = $this->call('shares', ['user' => 'alice', 'path' => 'Documents/report.txt']);
		$this->assertCount(1, $r->getData()['shares']);
		$this->assertRefused($this->call('shares', ['user' => 'alice', 'path' => 'FromBob']), 403, 'not_owner');
	}

	public function testMkdirMakesTheMissingFoldersInTheUsersOwnFiles(): void {
		$r = $this->call('mkdir', ['user' => 'alice', 'path' => 'Projects/2026/Q3']);
		$this->assertSame(['path' => 'Projects/2026/Q3', 'created' => true], $r->getData());
		$this->assertDirectoryExists($this->h->files->local('/alice/files/Projects/2026/Q3'));
		$r = $this->call('mkdir', ['user' => 'alice', 'path' => '/Projects/2026/Q3/']);
		$this->assertSame(['path' => 'Projects/2026/Q3', 'created' => false], $r->getData());

		$this->assertRefused($this->call('mkdir', ['user' => 'alice', 'path' => 'Documents/report.txt/x']), 400, 'invalid_request', 'is a file');
		$this->assertRefused($this->call('mkdir', ['user' => 'alice', 'path' => 'FromBob/mine']), 403, 'not_owner', 'belongs to bob');
		$this->assertDirectoryDoesNotExist($this->h->files->local('/alice/files/FromBob/mine'));
		$this->assertRefused($this->call('mkdir', ['user' => 'alice', 'path' => '../bob/files/x']), 400, 'invalid_request');
		$this->assertRefused($this->call('mkdir', ['user' => 'alice', 'path' => '']), 400, 'invalid_request');
		$this->assertDirectoryDoesNotExist($this->h->files->local('/bob/files/x'));
	}

	public function testConversationsAreTheUsersOwnWithTheBotMarked(): void {
		$r = $this->call('conversations', ['user' => 'alice']);
		$this->assertSame(200, $r->getStatus());
		$this->assertSame([
			['token' => 'readonly1', 'name' => 'Announcements', 'type' => Room::TYPE_GROUP, 'bot_enabled' => true],
			['token' => 'nobot123', 'name' => 'No bot here', 'type' => Room::TYPE_GROUP, 'bot_enabled' => false],
			['token' => 'team1234', 'name' => 'Team', 'type' => Room::TYPE_GROUP, 'bot_enabled' => true],
		], $r->getData()['conversations']);
	}

	public function testPostTargetNeedsAParticipantWhoMayWriteAndTheBot(): void {
		$r = $this->call('post-target', ['user' => 'alice', 'token' => 'team1234']);
		$this->assertSame(['token' => 'team1234', 'name' => 'Team', 'type' => Room::TYPE_GROUP], $r->getData());

		$this->assertRefused($this->call('post-target', ['user' => 'alice', 'token' => 'other123']), 403, 'not_participant', 'not in a conversation');
		// A conversation that does not exist looks the same.
		$this->assertRefused($this->call('post-target', ['user' => 'alice', 'token' => 'nothere1']), 403, 'not_participant', 'not in a conversation');
		$this->assertRefused($this->call('post-target', ['user' => 'alice', 'token' => 'readonly1']), 403, 'read_only');
		$this->assertRefused($this->call('post-target', ['user' => 'alice', 'token' => 'nobot123']), 403, 'bot_not_enabled', 'Bots');
		$this->h->participants->permissions['team1234']['alice'] = 0b1111110 & ~128;
		$this->assertRefused($this->call('post-target', ['user' => 'alice', 'token' => 'team1234']), 403, 'no_chat_permission');
		$this->assertRefused($this->call('post-target', ['user' => 'alice', 'token' => '../x']), 400, 'invalid_request', 'token');
	}

	public function testTheBotNotInstalledMeansNoConversationQualifies(): void {
		$this->h->botConversations->rows = [];
		$this->assertRefused($this->call('post-target', ['user' => 'alice', 'token' => 'team1234']), 403, 'bot_not_enabled');
		$this->assertFalse($this->call('conversations', ['user' => 'alice'])->getData()['conversations'][2]['bot_enabled']);
	}
}
