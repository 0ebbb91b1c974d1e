<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Service;

use OCA\Istota\Exception\BadSignatureException;
use OCA\Istota\Exception\DelegateRefusedException;
use OCA\Istota\Exception\InvalidInputException;
use OCP\AppFramework\Utility\ITimeFactory;
use OCP\Constants;
use OCP\Files\File;
use OCP\Files\Folder;
use OCP\Files\IRootFolder;
use OCP\Files\Node;
use OCP\Files\NotFoundException;
use OCP\Files\NotPermittedException;
use OCP\HintException;
use OCP\IGroupManager;
use OCP\IURLGenerator;
use OCP\IUser;
use OCP\IUserManager;
use OCP\Share\Exceptions\AlreadySharedException;
use OCP\Share\IManager as IShareManager;
use OCP\Share\IShare;
use Psr\Log\LoggerInterface;

/**
 * NextcloudDelegate does, inside Nextcloud, what the sidecar's `nextcloud` skill asks on
 * a user's behalf: share a file or folder of the user's own (with a user, a group or a
 * link), list the user's shares, create folders in the user's files, list the user's
 * Talk conversations and check that the user may have the bot post into one.
 *
 * Every call carries the shared-secret signature (the sidecar's word that the user is the
 * one its task runs for) and names the user in the signed body; nothing else in the body
 * is trusted. Actions go through Nextcloud's own APIs with the user as the actor, so
 * Nextcloud's sharing policies (link sharing off, enforced passwords or expiry, sharing
 * only within groups, …) apply as they would in the Files app. On top of them, only the
 * user's own files are touched: paths are relative to the user's home and never leave it,
 * and a file or folder that another user shared with them is refused even where Nextcloud
 * would allow a reshare.
 *
 * Replays: the signature is valid for a few minutes. Every action here either changes
 * nothing when repeated (folders that exist, a user or group share that exists, lists)
 * or is made idempotent: a link share carries the request's nonce in its label, and the
 * same request again returns that share instead of making another.
 */
class NextcloudDelegate {
	/** Longest path accepted, in bytes (Nextcloud's own limit is about 4000). */
	private const MAX_PATH = 4000;
	private const MAX_NOTE = 2000;
	private const MAX_PASSWORD = 200;
	/** Upper bound on the shares one list returns per type. */
	private const MAX_LISTED = 200;
	/** Talk's conversation tokens. */
	private const TOKEN_PATTERN = '/^[a-z0-9]{4,30}$/';

	public function __construct(
		private readonly AppSettings $settings,
		private readonly RequestSigner $signer,
		private readonly ITimeFactory $time,
		private readonly IUserManager $users,
		private readonly IGroupManager $groups,
		private readonly IRootFolder $rootFolder,
		private readonly IShareManager $shares,
		private readonly IURLGenerator $urls,
		private readonly TalkEnvironment $talk,
		private readonly LoggerInterface $logger,
	) {
	}

	/**
	 * Shares a file or folder of the user's: body {"user", "path", "type": "user"|"group"|
	 * "link", "with" (user or group id; not for links), "permissions": "read"|"edit",
	 * "expires": "YYYY-MM-DD" (optional), "password" (links only, optional), "note"
	 * (optional)}.
	 *
	 * @param array<string, string> $headers the X-Istota-* signature headers
	 * @return array<string, mixed> the share as listShares() describes it
	 */
	public function share(string $method, string $pathAndQuery, array $headers, string $body): array {
		$in = $this->verified($method, $pathAndQuery, $headers, $body);
		$uid = $this->user($in);
		$path = self::relativePath(self::string($in, 'path'));
		$type = self::string($in, 'type');
		$with = self::string($in, 'with');
		$permissions = self::string($in, 'permissions', 'read');
		$expires = self::expiry(self::string($in, 'expires'), $this->time->getTime());
		$password = self::string($in, 'password');
		$note = self::string($in, 'note');
		if ($path === '') {
			throw new InvalidInputException('give the file or folder to share; your whole home folder cannot be shared');
		}
		if (!in_array($permissions, ['read', 'edit'], true)) {
			throw new InvalidInputException('permissions must be "read" or "edit"');
		}
		if (strlen($note) > self::MAX_NOTE) {
			throw new InvalidInputException('the note is longer than ' . self::MAX_NOTE . ' bytes');
		}
		$shareType = match ($type) {
			'user' => IShare::TYPE_USER,
			'group' => IShare::TYPE_GROUP,
			'link' => IShare::TYPE_LINK,
			default => throw new InvalidInputException('type must be "user", "group" or "link"'),
		};
		if ($shareType === IShare::TYPE_LINK) {
			if ($with !== '') {
				throw new InvalidInputException('a link is shared with nobody in particular: leave out the recipient');
			}
			if (strlen($password) > self::MAX_PASSWORD) {
				throw new InvalidInputException('the password is longer than ' . self::MAX_PASSWORD . ' characters');
			}
		} else {
			if ($password !== '') {
				throw new InvalidInputException('only links have passwords');
			}
			if ($with === '') {
				throw new InvalidInputException('say whom to share with');
			}
			if ($shareType === IShare::TYPE_USER && !$this->users->userExists($with)) {
				throw new InvalidInputException('there is no user "' . $with . '"');
			}
			if ($shareType === IShare::TYPE_GROUP && !$this->groups->groupExists($with)) {
				throw new InvalidInputException('there is no group "' . $with . '"');
			}
			if ($shareType === IShare::TYPE_USER && $with === $uid) {
				throw new InvalidInputException('you cannot share with yourself');
			}
		}

		$home = $this->home($uid);
		$node = $this->ownNode($home, $uid, $path);
		$label = $shareType === IShare::TYPE_LINK ? $this->linkLabel($headers) : '';
		if ($label !== '') {
			$existing = $this->linkWithLabel($uid, $node, $label);
			if ($existing !== null) {
				return $this->describe($home, $existing);
			}
		}

		$share = $this->shares->newShare();
		$share->setNode($node);
		$share->setShareType($shareType);
		$share->setSharedBy($uid);
		$share->setPermissions(self::permissionBits($node, $permissions));
		if ($shareType !== IShare::TYPE_LINK) {
			$share->setSharedWith($with);
		}
		if ($expires !== null) {
			$share->setExpirationDate($expires);
		}
		if ($password !== '') {
			$share->setPassword($password);
		}
		if ($note !== '') {
			$share->setNote($note);
		}
		if ($label !== '') {
			$share->setLabel($label);
		}
		try {
			$created = $this->shares->createShare($share);
		} catch (\Throwable $e) {
			throw $this->shareRefusal($e, $path);
		}
		return $this->describe($home, $created);
	}

	/**
	 * The user's shares (to users, groups and links), optionally only those of one path:
	 * body {"user", "path" (optional)}.
	 *
	 * @param array<string, string> $headers
	 * @return array{shares: list<array<string, mixed>>}
	 */
	public function listShares(string $method, string $pathAndQuery, array $headers, string $body): array {
		$in = $this->verified($method, $pathAndQuery, $headers, $body);
		$uid = $this->user($in);
		$path = self::relativePath(self::string($in, 'path'));
		$home = $this->home($uid);
		$node = $path === '' ? null : $this->ownNode($home, $uid, $path);
		$out = [];
		foreach ([IShare::TYPE_USER, IShare::TYPE_GROUP, IShare::TYPE_LINK] as $type) {
			foreach ($this->shares->getSharesBy($uid, $type, $node, false, self::MAX_LISTED) as $share) {
				$out[] = $this->describe($home, $share);
			}
		}
		usort($out, static fn (array $a, array $b): int => [$a['path'], $a['id']] <=> [$b['path'], $b['id']]);
		return ['shares' => $out];
	}

	/**
	 * Creates a folder (and the folders above it that are missing) in the user's files:
	 * body {"user", "path"}. A folder that exists already is not an error.
	 *
	 * @param array<string, string> $headers
	 * @return array{path: string, created: bool}
	 */
	public function mkdir(string $method, string $pathAndQuery, array $headers, string $body): array {
		$in = $this->verified($method, $pathAndQuery, $headers, $body);
		$uid = $this->user($in);
		$path = self::relativePath(self::string($in, 'path'));
		if ($path === '') {
			throw new InvalidInputException('give the folder to create');
		}
		$folder = $this->home($uid);
		$created = false;
		$parent = '';
		foreach (explode('/', $path) as $name) {
			$sofar = $parent === '' ? $name : $parent . '/' . $name;
			try {
				$next = $folder->get($name);
			} catch (NotFoundException) {
				$next = null;
			}
			if ($next === null) {
				// Only into the user's own folders: a folder shared with them is another
				// user's data.
				$this->assertOwned($folder, $uid, $parent);
				try {
					$next = $folder->newFolder($name);
				} catch (NotPermittedException) {
					throw new DelegateRefusedException('not_permitted', 'you may not create a folder in ' . ($parent === '' ? 'your home folder' : '"' . $parent . '"'));
				}
				$created = true;
			} elseif (!$next instanceof Folder) {
				throw new InvalidInputException('"' . $sofar . '" is a file, not a folder');
			}
			$folder = $next;
			$parent = $sofar;
		}
		if (!$created) {
			$this->assertOwned($folder, $uid, $path);
		}
		return ['path' => $path, 'created' => $created];
	}

	/**
	 * The user's Talk conversations and whether the bot may post in each: body {"user"}.
	 *
	 * @param array<string, string> $headers
	 * @return array{conversations: list<array{token: string, name: string, type: int, bot_enabled: bool}>}
	 */
	public function conversations(string $method, string $pathAndQuery, array $headers, string $body): array {
		$in = $this->verified($method, $pathAndQuery, $headers, $body);
		$uid = $this->user($in);
		$list = $this->talk->conversationsOf($uid, AppSettings::BOT_URL);
		if ($list === null) {
			throw new DelegateRefusedException('no_talk', 'Talk is not available on this Nextcloud');
		}
		return ['conversations' => $list];
	}

	/**
	 * Checks that the bot may post into a conversation for the user: body {"user",
	 * "token"}. The user must be a participant who may chat there, the conversation must be
	 * writable and local, and the bot must be enabled in it. The sidecar then posts as the
	 * bot; nothing is posted here.
	 *
	 * @param array<string, string> $headers
	 * @return array{token: string, name: string, type: int}
	 */
	public function postTarget(string $method, string $pathAndQuery, array $headers, string $body): array {
		$in = $this->verified($method, $pathAndQuery, $headers, $body);
		$uid = $this->user($in);
		$token = self::string($in, 'token');
		if (preg_match(self::TOKEN_PATTERN, $token) !== 1) {
			throw new InvalidInputException('a conversation token is 4 to 30 lowercase letters and digits');
		}
		$target = $this->talk->postTarget($uid, $token, AppSettings::BOT_URL);
		if ($target['problem'] !== null) {
			throw new DelegateRefusedException($target['problem'], match ($target['problem']) {
				TalkEnvironment::NOT_PARTICIPANT => 'you are not in a conversation "' . $token . '"; the bot posts only where you are a participant',
				TalkEnvironment::READ_ONLY => 'the conversation "' . $target['name'] . '" is read-only',
				TalkEnvironment::NO_CHAT => 'you may not write in the conversation "' . $target['name'] . '"',
				TalkEnvironment::FEDERATED => 'the conversation "' . $target['name'] . '" is on another server; the bot cannot post there',
				TalkEnvironment::BOT_NOT_ENABLED => 'the bot is not added to the conversation "' . $target['name'] . '"; a moderator can add it in the conversation settings under Bots',
				default => 'Talk is not available on this Nextcloud',
			});
		}
		return ['token' => $token, 'name' => $target['name'], 'type' => $target['type']];
	}

	/**
	 * The decoded body of a correctly signed request.
	 *
	 * @param array<string, string> $headers
	 * @return array<string, mixed>
	 * @throws BadSignatureException
	 * @throws InvalidInputException
	 */
	private function verified(string $method, string $pathAndQuery, array $headers, string $body): array {
		if (!$this->signer->verifyHeaders($this->settings->sharedSecret(), $method, $pathAndQuery, $headers, $body, $this->time->getTime())) {
			throw new BadSignatureException();
		}
		$in = json_decode($body, true);
		if (!is_array($in) || array_is_list($in) && $in !== []) {
			throw new InvalidInputException('the request body is not a JSON object');
		}
		return $in;
	}

	/** @param array<string, mixed> $in */
	private function user(array $in): string {
		$uid = self::string($in, 'user');
		$user = $uid === '' ? null : $this->users->get($uid);
		if (!$user instanceof IUser || !$user->isEnabled()) {
			throw new DelegateRefusedException('unknown_user', 'the user this task runs for is not an enabled Nextcloud user');
		}
		return $uid;
	}

	/** @param array<string, mixed> $in */
	private static function string(array $in, string $key, string $default = ''): string {
		$v = $in[$key] ?? $default;
		if (!is_string($v)) {
			throw new InvalidInputException($key . ' must be a string');
		}
		return $v;
	}

	/**
	 * A path inside the user's home, as the Files app shows it: "/" or nothing is the home
	 * itself, a leading "/" is ignored, and ".", ".." and other tricks are refused rather
	 * than resolved, so nothing can point outside.
	 */
	public static function relativePath(string $path): string {
		if (strlen($path) > self::MAX_PATH) {
			throw new InvalidInputException('the path is longer than ' . self::MAX_PATH . ' bytes');
		}
		if (preg_match('/[\x00-\x1f\x7f\\\\]/', $path) === 1 || !mb_check_encoding($path, 'UTF-8')) {
			throw new InvalidInputException('the path has control characters, backslashes or is not UTF-8');
		}
		$parts = [];
		foreach (explode('/', $path) as $part) {
			if ($part === '') {
				continue;
			}
			if ($part === '.' || $part === '..' || trim($part) === '') {
				throw new InvalidInputException('the path "' . $path . '" has a "' . $part . '" part; give it from your home folder without "." or ".."');
			}
			$parts[] = $part;
		}
		return implode('/', $parts);
	}

	private function home(string $uid): Folder {
		try {
			return $this->rootFolder->getUserFolder($uid);
		} catch (\Throwable $e) {
			$this->logger->warning('Istota: the user folder could not be opened', ['user' => $uid, 'exception' => $e]);
			throw new DelegateRefusedException('no_files', 'your files cannot be opened right now');
		}
	}

	/** The node at $path in $home, which must be the user's own. */
	private function ownNode(Folder $home, string $uid, string $path): Node {
		try {
			$node = $home->get($path);
		} catch (NotFoundException|NotPermittedException) {
			throw new InvalidInputException('there is no file or folder "' . $path . '" in your files');
		}
		$homePath = rtrim((string)$home->getPath(), '/') . '/';
		if (!str_starts_with((string)$node->getPath(), $homePath)) {
			throw new InvalidInputException('there is no file or folder "' . $path . '" in your files');
		}
		$this->assertOwned($node, $uid, $path);
		return $node;
	}

	private function assertOwned(Node $node, string $uid, string $path): void {
		$owner = $node->getOwner();
		$ownerId = $owner instanceof IUser ? (string)$owner->getUID() : '';
		if ($ownerId !== $uid) {
			$shown = $path === '' ? 'your home folder' : '"' . $path . '"';
			throw new DelegateRefusedException('not_owner', $shown . ' belongs to ' . ($ownerId === '' ? 'someone else' : $ownerId)
				. ' and is only shared with you; the bot acts only on your own files');
		}
	}

	/** Nextcloud permission bits for "read" or "edit" on this node. */
	private static function permissionBits(Node $node, string $permissions): int {
		if ($permissions === 'read') {
			return Constants::PERMISSION_READ;
		}
		if ($node instanceof File) {
			return Constants::PERMISSION_READ | Constants::PERMISSION_UPDATE;
		}
		return Constants::PERMISSION_READ | Constants::PERMISSION_UPDATE | Constants::PERMISSION_CREATE | Constants::PERMISSION_DELETE;
	}

	/** An expiry date "YYYY-MM-DD" that is after today, or null for none. */
	public static function expiry(string $date, int $now): ?\DateTime {
		if ($date === '') {
			return null;
		}
		$parsed = preg_match('/^\d{4}-\d{2}-\d{2}$/', $date) === 1 ? \DateTime::createFromFormat('!Y-m-d', $date) : false;
		if ($parsed === false || $parsed->format('Y-m-d') !== $date) {
			throw new InvalidInputException('the expiry date must be a date YYYY-MM-DD');
		}
		if ($date <= gmdate('Y-m-d', $now)) {
			throw new InvalidInputException('the expiry date must be after today');
		}
		return $parsed;
	}

	/**
	 * The label that ties a link share to the request that made it.
	 *
	 * @param array<string, string> $headers
	 */
	private function linkLabel(array $headers): string {
		$nonce = $headers[RequestSigner::HEADER_NONCE] ?? '';
		return $this->settings->botName() . ' ' . substr(hash('sha256', $nonce), 0, 12);
	}

	private function linkWithLabel(string $uid, Node $node, string $label): ?IShare {
		foreach ($this->shares->getSharesBy($uid, IShare::TYPE_LINK, $node, false, self::MAX_LISTED) as $share) {
			if ($share->getLabel() === $label) {
				return $share;
			}
		}
		return null;
	}

	/**
	 * Turns what Nextcloud's share manager threw into a refusal the agent can read. Its
	 * own checks speak plain language (sharing disabled, links not allowed, password or
	 * expiry rules, already shared); anything else is an internal failure.
	 */
	private function shareRefusal(\Throwable $e, string $path): \Throwable {
		if ($e instanceof HintException) {
			$hint = $e->getHint() !== '' ? $e->getHint() : $e->getMessage();
			return new DelegateRefusedException($e instanceof AlreadySharedException ? 'already_shared' : 'share_refused', 'Nextcloud refused to share "' . $path . '": ' . $hint);
		}
		if ($e instanceof \InvalidArgumentException || get_class($e) === \Exception::class) {
			return new DelegateRefusedException('share_refused', 'Nextcloud refused to share "' . $path . '": ' . $e->getMessage());
		}
		return $e;
	}

	/**
	 * One share as the skill prints it.
	 *
	 * @return array<string, mixed>
	 */
	private function describe(Folder $home, IShare $share): array {
		$type = match ($share->getShareType()) {
			IShare::TYPE_USER => 'user',
			IShare::TYPE_GROUP => 'group',
			IShare::TYPE_LINK => 'link',
			default => 'other',
		};
		try {
			$path = self::relativePath((string)$home->getRelativePath((string)$share->getNode()->getPath()));
		} catch (\Throwable) {
			$path = '';
		}
		$expires = $share->getExpirationDate();
		$bits = (int)$share->getPermissions();
		return [
			'id' => (string)$share->getId(),
			'type' => $type,
			'path' => $path,
			'with' => $type === 'link' ? '' : (string)$share->getSharedWith(),
			'permissions' => ($bits & ~(Constants::PERMISSION_READ | Constants::PERMISSION_SHARE)) !== 0 ? 'edit' : 'read',
			'expires' => $expires instanceof \DateTimeInterface ? $expires->format('Y-m-d') : '',
			'password' => $type === 'link' && (string)$share->getPassword() !== '',
			'url' => $type === 'link' ? $this->urls->linkToRouteAbsolute('files_sharing.sharecontroller.showShare', ['token' => (string)$share->getToken()]) : '',
			'note' => (string)$share->getNote(),
		];
	}
}
